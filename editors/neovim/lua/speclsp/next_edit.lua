-- Next-edit suggestions: ask the server (`speclsp/nextEdit`) how the region around the cursor should
-- read after the recent edits, preview its answer over the buffer, then apply or dismiss it.
--
-- The preview (Neovim 0.7+: extmarks with a highlighted range and virtual lines): the text the edits
-- delete is highlighted (`hl_delete`, e.g. DiffDelete) where it stands; below each group of edited
-- lines, virtual lines show those lines as they will read, the inserted text in `hl_add` (DiffAdd)
-- and the unchanged rest in `hl_context`. Accepting applies the server's `edits` with
-- `vim.lsp.util.apply_text_edits`, and only while the buffer is exactly as it was when the answer
-- was shown (same changedtick): a stale suggestion is dropped, never applied.

local position = require("speclsp.position")

local M = {}

M.ns = vim.api.nvim_create_namespace("speclsp_next_edit")

local state = {
  pending = nil, -- { client, request_id, bufnr, changedtick, encoding }
  preview = nil, -- { bufnr, edits, encoding, changedtick, result }
  event = nil, -- what happened last: requested, shown, none, stale, accepted, dismissed, error
}

local function is_null(value)
  return value == nil or value == vim.NIL
end

--- The edits as byte ranges of `lines` (a 1-based table of a buffer's lines), sorted by start:
--- { row, col, end_row, end_col, text } with 0-based rows and byte columns; LSP positions are in
--- `encoding`. Returns nil when two edits overlap (the server never sends such).
function M.byte_edits(lines, edits, encoding)
  local out = {}
  for _, edit in ipairs(edits) do
    local row, col = position.to_byte(lines, edit.range.start, encoding)
    local end_row, end_col = position.to_byte(lines, edit.range["end"], encoding)
    table.insert(out, { row = row, col = col, end_row = end_row, end_col = end_col, text = edit.newText or "" })
  end
  table.sort(out, function(a, b)
    return a.row < b.row or (a.row == b.row and a.col < b.col)
  end)
  for i = 2, #out do
    local prev, cur = out[i - 1], out[i]
    if cur.row < prev.end_row or (cur.row == prev.end_row and cur.col < prev.end_col) then
      return nil
    end
  end
  return out
end

--- Groups of edits that touch the same lines, each as the lines will read after the edits:
--- { first_row, last_row, new_lines } where a new line is a list of { text, inserted } pieces.
function M.hunks(lines, byte_edits)
  local hunks = {}
  for _, edit in ipairs(byte_edits) do
    local last = hunks[#hunks]
    if last and edit.row <= last.last_row then
      table.insert(last.edits, edit)
      last.last_row = math.max(last.last_row, edit.end_row)
    else
      table.insert(hunks, { first_row = edit.row, last_row = edit.end_row, edits = { edit } })
    end
  end
  for _, hunk in ipairs(hunks) do
    local pieces, row, col = {}, hunk.first_row, 0
    for _, edit in ipairs(hunk.edits) do
      -- The unchanged text from (row, col) to the edit's start, then the inserted text.
      while row < edit.row do
        table.insert(pieces, { (lines[row + 1] or ""):sub(col + 1) .. "\n", false })
        row, col = row + 1, 0
      end
      table.insert(pieces, { (lines[row + 1] or ""):sub(col + 1, edit.col), false })
      table.insert(pieces, { edit.text, true })
      row, col = edit.end_row, edit.end_col
    end
    table.insert(pieces, { (lines[row + 1] or ""):sub(col + 1), false })
    hunk.new_lines = { {} }
    for _, piece in ipairs(pieces) do
      local parts = vim.split(piece[1], "\n", { plain = true })
      for i, part in ipairs(parts) do
        if i > 1 then
          table.insert(hunk.new_lines, {})
        end
        if part ~= "" then
          table.insert(hunk.new_lines[#hunk.new_lines], { part, piece[2] })
        end
      end
    end
  end
  return hunks
end

local function display(text, tabstop)
  return (text:gsub("\t", string.rep(" ", tabstop)))
end

local function draw(bufnr, byte_edits, opts)
  local lines = vim.api.nvim_buf_get_lines(bufnr, 0, -1, false)
  local tabstop = vim.bo[bufnr].tabstop
  for _, edit in ipairs(byte_edits) do
    if edit.end_row > edit.row or edit.end_col > edit.col then
      vim.api.nvim_buf_set_extmark(bufnr, M.ns, edit.row, edit.col, {
        end_row = edit.end_row, end_col = edit.end_col, hl_group = opts.hl_delete, priority = 200,
      })
    end
  end
  for _, hunk in ipairs(M.hunks(lines, byte_edits)) do
    local virt_lines = {}
    for _, pieces in ipairs(hunk.new_lines) do
      local chunks = {}
      for _, piece in ipairs(pieces) do
        table.insert(chunks, { display(piece[1], tabstop), piece[2] and opts.hl_add or opts.hl_context })
      end
      table.insert(virt_lines, #chunks > 0 and chunks or { { "", opts.hl_context } })
    end
    vim.api.nvim_buf_set_extmark(bufnr, M.ns, hunk.last_row, 0, { virt_lines = virt_lines })
  end
end

--- Remove the preview (nothing is applied).
function M.clear()
  local preview = state.preview
  state.preview = nil
  if preview and vim.api.nvim_buf_is_valid(preview.bufnr) then
    vim.api.nvim_buf_clear_namespace(preview.bufnr, M.ns, 0, -1)
  end
end

local function cancel_pending()
  local pending = state.pending
  state.pending = nil
  if pending then
    pending.client.cancel_request(pending.request_id)
  end
end

--- Stop a request in flight and remove the preview.
function M.dismiss()
  local had = state.preview ~= nil or state.pending ~= nil
  cancel_pending()
  M.clear()
  if had then
    state.event = "dismissed"
  end
end

local function notify(message, level)
  vim.notify("speclsp: " .. message, level or vim.log.levels.INFO)
end

--- Show `result` (a `speclsp/nextEdit` answer) over `bufnr` as a preview. Returns whether one is shown.
function M.show(bufnr, result, encoding, opts)
  M.clear()
  local lines = vim.api.nvim_buf_get_lines(bufnr, 0, -1, false)
  local byte_edits = M.byte_edits(lines, result.edits, encoding)
  if byte_edits == nil then
    state.event = "error"
    notify("the suggested edits overlap; ignored", vim.log.levels.WARN)
    return false
  end
  draw(bufnr, byte_edits, opts)
  state.preview = { bufnr = bufnr, edits = result.edits, encoding = encoding, result = result,
                    changedtick = vim.api.nvim_buf_get_changedtick(bufnr) }
  state.event = "shown"
  return true
end

local function on_result(err, result, request, opts)
  if state.pending == nil or state.pending.request_id ~= request.request_id then
    return -- superseded or dismissed
  end
  state.pending = nil
  if err then
    state.event = "error"
    notify("next edit failed: " .. tostring(err.message or err), vim.log.levels.WARN)
    return
  end
  if is_null(result) or is_null(result.edits) or #result.edits == 0 then
    state.event = "none"
    notify("no edit to suggest here")
    return
  end
  local bufnr = request.bufnr
  local version = vim.lsp.util.buf_versions[bufnr]
  if not vim.api.nvim_buf_is_valid(bufnr) or vim.api.nvim_buf_get_changedtick(bufnr) ~= request.changedtick
      or (not is_null(result.version) and version ~= nil and result.version ~= version) then
    state.event = "stale" -- the buffer changed while the server worked
    return
  end
  M.show(bufnr, result, request.encoding, opts)
end

--- Ask `client` for the next edit at the cursor of the current window (its buffer must be attached),
--- cancelling any request in flight; the answer is previewed when it comes. `opts`: the highlight
--- groups { hl_delete, hl_add, hl_context }. Returns whether the request was sent.
function M.request(client, opts)
  M.dismiss()
  local bufnr = vim.api.nvim_get_current_buf()
  local encoding = client.offset_encoding or "utf-16"
  local params = vim.lsp.util.make_position_params(0, encoding)
  local request = { client = client, bufnr = bufnr, encoding = encoding,
                    changedtick = vim.api.nvim_buf_get_changedtick(bufnr) }
  local ok, id = client.request("speclsp/nextEdit", params, function(err, result)
    on_result(err, result, request, opts)
  end, bufnr)
  if not ok then
    state.event = "error"
    return false
  end
  request.request_id = id
  state.pending = request
  state.event = "requested"
  return true
end

--- Apply the previewed edits. Refused (false, the preview removed) when the buffer changed since the
--- suggestion was shown; false when none is shown.
function M.accept()
  local preview = state.preview
  if not preview then
    return false
  end
  M.clear()
  if not vim.api.nvim_buf_is_valid(preview.bufnr)
      or vim.api.nvim_buf_get_changedtick(preview.bufnr) ~= preview.changedtick then
    state.event = "stale"
    notify("the buffer changed since the suggestion; not applied", vim.log.levels.WARN)
    return false
  end
  vim.lsp.util.apply_text_edits(preview.edits, preview.bufnr, preview.encoding)
  state.event = "accepted"
  return true
end

--- Drop the preview if its buffer changed since it was shown (called on text changes).
function M.check_stale()
  local preview = state.preview
  if preview and (not vim.api.nvim_buf_is_valid(preview.bufnr)
      or vim.api.nvim_buf_get_changedtick(preview.bufnr) ~= preview.changedtick) then
    M.clear()
    state.event = "stale"
  end
end

--- Forget the preview and the request in flight without telling the server (it exited).
function M.reset()
  state.pending = nil
  M.clear()
end

--- Whether a preview is shown.
function M.visible()
  return state.preview ~= nil
end

--- Whether a request is in flight.
function M.pending()
  return state.pending ~= nil
end

--- What happened last: "requested", "shown", "none", "stale", "accepted", "dismissed", "error" or nil.
function M.last_event()
  return state.event
end

--- The shown answer (`speclsp/nextEdit`'s result), or nil.
function M.suggestion()
  return state.preview and vim.deepcopy(state.preview.result) or nil
end

return M
