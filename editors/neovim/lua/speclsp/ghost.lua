-- Ghost text: a suggestion drawn with extmarks at the cursor, and the text operations behind
-- accept / accept_word / accept_line. No LSP here.
--
-- Drawing: the first line is virtual text at the cursor ("inline" on Neovim 0.10+; on older
-- versions an "overlay" of the suggestion followed by the rest of the real line, so nothing to the
-- right is hidden); further lines are virtual lines below.

local M = {}

M.ns = vim.api.nvim_create_namespace("speclsp_ghost")

local has_inline = vim.fn.has("nvim-0.10") == 1

--- Display form of a line: tabs expanded (virtual text does not render them).
local function display(text, tabstop)
  return (text:gsub("\t", string.rep(" ", tabstop)))
end

--- Draw `text` as ghost text at (row, col) of `bufnr`; row 0-based, col in bytes. Clears the old one.
--- `replace` (bytes, default 0): the text right of the cursor that accepting replaces, marked with
--- `replaced_hl_group`.
function M.show(bufnr, row, col, text, hl_group, replace, replaced_hl_group)
  M.clear(bufnr)
  if replace and replace > 0 then
    vim.api.nvim_buf_set_extmark(bufnr, M.ns, row, col, { end_row = row, end_col = col + replace,
                                                          hl_group = replaced_hl_group or "DiffDelete" })
  end
  local lines = vim.split(text, "\n", { plain = true })
  local line = vim.api.nvim_buf_get_lines(bufnr, row, row + 1, false)[1] or ""
  local right = line:sub(col + (replace or 0) + 1) -- drawn after an overlay: the line as accepting leaves it
  local tabstop = vim.bo[bufnr].tabstop
  local opts = { hl_mode = "combine", priority = 200 }
  if has_inline then
    opts.virt_text = { { display(lines[1], tabstop), hl_group } }
    opts.virt_text_pos = "inline"
  elseif #lines == 1 then
    -- Overlay covers the rest of the real line, so draw that after the suggestion.
    opts.virt_text = { { display(lines[1], tabstop), hl_group }, { display(right, tabstop), "Normal" } }
    opts.virt_text_pos = "overlay"
  else
    opts.virt_text = { { display(lines[1], tabstop), hl_group } }
    opts.virt_text_pos = "overlay"
  end
  if #lines > 1 then
    local virt_lines = {}
    for i = 2, #lines do
      local chunks = { { display(lines[i], tabstop), hl_group } }
      if i == #lines and right ~= "" and not has_inline then
        table.insert(chunks, { display(right, tabstop), "Normal" })
      end
      table.insert(virt_lines, chunks)
    end
    opts.virt_lines = virt_lines
  end
  return vim.api.nvim_buf_set_extmark(bufnr, M.ns, row, col, opts)
end

function M.clear(bufnr)
  if vim.api.nvim_buf_is_valid(bufnr) then
    vim.api.nvim_buf_clear_namespace(bufnr, M.ns, 0, -1)
  end
end

--- The part of `text` that accept_word takes: leading blanks (line breaks included) and one run
--- of identifier characters, or one run of other non-blank characters.
function M.next_word(text)
  return text:match("^%s*[%w_]+") or text:match("^%s*[^%w_%s]+") or text
end

--- The part of `text` that accept_line takes: up to the end of the current line; when the text
--- starts with a line break, that break and the next line.
function M.next_line(text)
  local head = text:match("^([^\n]*)")
  if head ~= "" then
    return head
  end
  return text:match("^(\n[^\n]*)") or text
end

--- Insert `text` at (row, col), replacing `replace` bytes there (default 0), and put the cursor after it.
--- Returns the new (row, col).
function M.insert(bufnr, row, col, text, replace)
  local lines = vim.split(text, "\n", { plain = true })
  vim.api.nvim_buf_set_text(bufnr, row, col, row, col + (replace or 0), lines)
  local end_row = row + #lines - 1
  local end_col = (#lines == 1) and (col + #lines[1]) or #lines[#lines]
  return end_row, end_col
end

return M
