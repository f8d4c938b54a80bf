-- LSP positions to buffer columns: one place for the client's offset encoding (utf-8, utf-16 or
-- utf-32 code units in an LSP `character`; byte columns in Neovim).

local M = {}

--- Byte column of an LSP position's `character` on `line`, in `encoding`; past the end: the line's length.
function M.byte_col(line, character, encoding)
  if encoding == "utf-8" then
    return math.min(character, #line)
  end
  local ok, col = pcall(vim.str_byteindex, line, character, encoding == "utf-16")
  return ok and col or #line
end

--- An LSP position as a 0-based (row, byte col) of `lines` (a buffer's lines, 1-based table), clamped
--- to the buffer: a line past the last one is the end of the last line.
function M.to_byte(lines, position, encoding)
  local row = position.line
  if row >= #lines then
    local last = math.max(#lines - 1, 0)
    return last, #(lines[last + 1] or "")
  end
  return row, M.byte_col(lines[row + 1], position.character, encoding)
end

return M
