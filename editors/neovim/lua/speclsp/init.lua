-- speclsp for Neovim: starts `speclsp serve` and shows its inline completions as ghost text.
--
--   require("speclsp").setup({ cmd = { "speclsp", "serve" }, settings = { decoding = { drafter = "auto" } } })
--
-- Neovim 0.12+ uses the built-in `vim.lsp.inline_completion`; older versions (0.7+) request
-- `textDocument/inlineCompletion` here (debounced, cancelling the previous request), draw ghost text
-- with extmarks, and accept the whole suggestion, a word or a line. Positions use the client's
-- offset encoding. `:SpeclspStatus` and `:SpeclspLog` show model state and the latency trace.
--
-- Next-edit suggestions (any version): `:SpeclspNextEdit` (or `require("speclsp").next_edit()`) asks
-- how the region around the cursor should read after the recent edits and previews the answer; in
-- normal mode `next_edit.accept` applies it and `next_edit.dismiss` drops it (see speclsp.next_edit).

local ghost = require("speclsp.ghost")
local position = require("speclsp.position")
local next_edit = require("speclsp.next_edit")

local M = {}

local defaults = {
  cmd = { "speclsp", "serve" }, -- how to start the server
  -- Server settings (the `speclsp` section) by group; every group and key with its default in
  -- docs/settings.md (generated from lsp_server/settings/spec.py). E.g.
  --   settings = { model = { target = "auto", draft = "auto" }, decoding = { drafter = "auto" },
  --                completion = { maxNewTokens = 64 } }
  settings = {},
  filetypes = nil, -- list of filetypes to attach to; nil: every buffer with a file
  debounce_ms = 75, -- quiet time after a keystroke before asking
  keys = { accept = "<Tab>", accept_word = "<C-Right>", accept_line = "<C-Down>", dismiss = "<C-]>" },
  hl_group = "Comment",
  replaced_hl_group = "DiffDelete", -- text right of the cursor that a suggestion replaces
  next_edit = { -- the next-edit preview: normal-mode keys (active only while a preview is shown), highlights
    accept = "<Tab>", dismiss = "<Esc>",
    hl_delete = "DiffDelete", hl_add = "DiffAdd", hl_context = "DiffChange",
  },
  builtin = true, -- use vim.lsp.inline_completion where Neovim has it (0.12+)
  log_lines = 500, -- server log lines kept for :SpeclspLog
  -- A buffer's workspace folder is the nearest directory at or above its file holding one of these
  -- (version control, then project manifests); with none, the server runs without a workspace folder
  -- (single-file mode: nothing indexed), never rooted at the file's own directory.
  root_markers = { ".git", ".hg", ".svn", ".jj", "pyproject.toml", "setup.py", "setup.cfg", "package.json",
                   "Cargo.toml", "go.mod", "pom.xml", "build.gradle", "build.gradle.kts", "composer.json",
                   "Gemfile", "mix.exs", "deno.json" },
}

local state = {
  config = nil,
  client_id = nil,
  status = nil, -- last speclsp/status payload
  log = {}, -- last server log lines
  timer = nil,
  pending = nil, -- { bufnr, request_id, changedtick }
  suggestion = nil, -- { bufnr, row, col, text, changedtick }
  stats = { requests = 0, cancelled = 0, shown = 0, accepted = 0 },
}

local function use_builtin()
  return state.config.builtin and vim.lsp.inline_completion ~= nil and vim.lsp.inline_completion.enable ~= nil
end

local function client()
  return state.client_id and vim.lsp.get_client_by_id(state.client_id) or nil
end

local function push_log(line)
  table.insert(state.log, line)
  if #state.log > state.config.log_lines then
    table.remove(state.log, 1)
  end
end

-- Requests and ghost text (the path for Neovim before 0.12) ---------------------------------

local function cancel_pending()
  local pending = state.pending
  state.pending = nil
  if pending then
    local c = client()
    if c then
      c.cancel_request(pending.request_id)
    end
    state.stats.cancelled = state.stats.cancelled + 1
  end
end

--- Hide the suggestion and stop any request in flight.
function M.dismiss()
  cancel_pending()
  if state.timer then
    state.timer:stop()
  end
  if state.suggestion then
    ghost.clear(state.suggestion.bufnr)
    state.suggestion = nil
  end
end

-- `replace`: bytes right of the cursor that accepting replaces (an item whose range ends past the
-- cursor, e.g. a next-edit suggestion on the cursor's line); 0 for a plain insertion.
local function show(bufnr, row, col, text, replace)
  if text == "" then
    return
  end
  replace = replace or 0
  state.suggestion = { bufnr = bufnr, row = row, col = col, text = text, replace = replace,
                       changedtick = vim.api.nvim_buf_get_changedtick(bufnr) }
  ghost.show(bufnr, row, col, text, state.config.hl_group, replace, state.config.replaced_hl_group)
  state.stats.shown = state.stats.shown + 1
end

local function first_item(result)
  if type(result) ~= "table" then
    return nil
  end
  local items = result.items or result
  return items[1]
end

local function on_result(err, result, bufnr, request_id, changedtick, row, col, encoding)
  if state.pending == nil or state.pending.request_id ~= request_id then
    return -- superseded
  end
  state.pending = nil
  if err or vim.api.nvim_get_current_buf() ~= bufnr or vim.api.nvim_get_mode().mode:sub(1, 1) ~= "i"
      or vim.api.nvim_buf_get_changedtick(bufnr) ~= changedtick then
    return -- stale: the buffer or cursor moved on
  end
  local cursor = vim.api.nvim_win_get_cursor(0)
  if cursor[1] - 1 ~= row or cursor[2] ~= col then
    return
  end
  local item = first_item(result)
  if not item then
    return
  end
  local text = type(item.insertText) == "table" and item.insertText.value or item.insertText
  if type(text) ~= "string" then
    return
  end
  local replace = 0
  if item.range and item.range.start.line == row then
    -- A range starting before the cursor replaces what was typed: show only the rest.
    local line = vim.api.nvim_buf_get_lines(bufnr, row, row + 1, false)[1] or ""
    local start = position.byte_col(line, item.range.start.character, encoding)
    if start < col then
      local typed = line:sub(start + 1, col)
      if text:sub(1, #typed) ~= typed then
        return
      end
      text = text:sub(#typed + 1)
    end
    -- A range ending right of the cursor on its line replaces that text when accepted.
    if item.range["end"].line == row then
      replace = math.max(0, position.byte_col(line, item.range["end"].character, encoding) - col)
    end
  end
  show(bufnr, row, col, text, replace)
end

--- Ask the server for a completion at the cursor now (cancelling any request in flight).
function M.request()
  local c = client()
  local bufnr = vim.api.nvim_get_current_buf()
  if not c or not vim.lsp.buf_is_attached(bufnr, c.id) then
    return
  end
  cancel_pending()
  local cursor = vim.api.nvim_win_get_cursor(0)
  local row, col = cursor[1] - 1, cursor[2]
  local encoding = c.offset_encoding or "utf-16"
  local params = vim.lsp.util.make_position_params(0, encoding)
  params.context = { triggerKind = 2 } -- Automatic
  local changedtick = vim.api.nvim_buf_get_changedtick(bufnr)
  local request_id
  local ok, id = c.request("textDocument/inlineCompletion", params, function(err, result)
    on_result(err, result, bufnr, request_id, changedtick, row, col, encoding)
  end, bufnr)
  if ok then
    request_id = id
    state.pending = { bufnr = bufnr, request_id = id, changedtick = changedtick }
    state.stats.requests = state.stats.requests + 1
  end
end

local function schedule_request()
  if state.timer == nil then
    state.timer = vim.loop.new_timer()
  end
  state.timer:stop()
  state.timer:start(state.config.debounce_ms, 0, vim.schedule_wrap(function()
    if vim.api.nvim_get_mode().mode:sub(1, 1) == "i" then
      M.request()
    end
  end))
end

--- Typing: keep the suggestion when the typed text matches its start, else ask again.
local function on_text_changed()
  local s = state.suggestion
  local bufnr = vim.api.nvim_get_current_buf()
  if s and s.bufnr == bufnr then
    if vim.api.nvim_buf_get_changedtick(bufnr) == s.changedtick then
      return
    end
    local cursor = vim.api.nvim_win_get_cursor(0)
    local line = vim.api.nvim_buf_get_lines(bufnr, s.row, s.row + 1, false)[1] or ""
    if cursor[1] - 1 == s.row and cursor[2] > s.col then
      local typed = line:sub(s.col + 1, cursor[2])
      if s.text:sub(1, #typed) == typed and #typed < #s.text then
        show(bufnr, s.row, cursor[2], s.text:sub(#typed + 1), s.replace)
        return
      end
    end
  end
  M.dismiss()
  schedule_request()
end

local function on_cursor_moved()
  local s = state.suggestion
  if not s then
    return
  end
  local cursor = vim.api.nvim_win_get_cursor(0)
  if vim.api.nvim_get_current_buf() ~= s.bufnr or cursor[1] - 1 ~= s.row or cursor[2] ~= s.col then
    if vim.api.nvim_buf_get_changedtick(s.bufnr) == s.changedtick then
      M.dismiss() -- moved without typing
    end
  end
end

-- Accepting ---------------------------------------------------------------------------------

local function accept_part(take)
  local s = state.suggestion
  if not s then
    return false
  end
  local part = take(s.text)
  local rest = s.text:sub(#part + 1)
  ghost.clear(s.bufnr)
  state.suggestion = nil
  -- The replaced text goes with the last part (until then it stays right of the cursor).
  local replace = rest == "" and s.replace or 0
  local row, col = ghost.insert(s.bufnr, s.row, s.col, part, replace)
  vim.api.nvim_win_set_cursor(0, { row + 1, col })
  state.stats.accepted = state.stats.accepted + 1
  if rest ~= "" then
    show(s.bufnr, row, col, rest, s.replace)
  end
  return true
end

local function builtin_partial(take)
  return vim.lsp.inline_completion.get({
    on_accept = function(item)
      local text = type(item.insert_text) == "table" and item.insert_text.value or item.insert_text
      if type(text) == "string" then
        local cursor = vim.api.nvim_win_get_cursor(0)
        local row, col = ghost.insert(0, cursor[1] - 1, cursor[2], take(text))
        vim.api.nvim_win_set_cursor(0, { row + 1, col })
      end
      return nil
    end,
  })
end

--- Insert the whole suggestion. Returns false when there is none.
function M.accept()
  if use_builtin() then
    return vim.lsp.inline_completion.get()
  end
  return accept_part(function(text) return text end)
end

--- Insert the suggestion's next word; the rest stays shown.
function M.accept_word()
  if use_builtin() then
    return builtin_partial(ghost.next_word)
  end
  return accept_part(ghost.next_word)
end

--- Insert the suggestion up to the end of its line; the rest stays shown.
function M.accept_line()
  if use_builtin() then
    return builtin_partial(ghost.next_line)
  end
  return accept_part(ghost.next_line)
end

-- Next-edit suggestions ----------------------------------------------------------------------

--- Ask for the next edit at the cursor and preview it (replacing any shown or pending one).
--- Returns whether the request was sent (false: no server attached to the buffer).
function M.next_edit()
  local c = client()
  if not c or not vim.lsp.buf_is_attached(0, c.id) then
    vim.notify("speclsp: no server attached to this buffer", vim.log.levels.WARN)
    return false
  end
  return next_edit.request(c, state.config.next_edit)
end

--- Apply the previewed next edit; false when none is shown or the buffer changed since (then dropped).
function M.accept_next_edit()
  return next_edit.accept()
end

--- Drop the next-edit preview and any request for one in flight.
function M.dismiss_next_edit()
  next_edit.dismiss()
end

--- Whether a suggestion is shown (the pre-0.12 path).
function M.visible()
  return state.suggestion ~= nil
end

--- The suggestion's text, or nil.
function M.suggestion()
  return state.suggestion and state.suggestion.text or nil
end

--- Whether a request is in flight.
function M.pending()
  return state.pending ~= nil
end

--- The last `speclsp/status` payload from the server, or nil.
function M.server_status()
  return state.status and vim.deepcopy(state.status) or nil
end

--- Counters of this session: requests, cancelled, shown, accepted.
function M.stats()
  return vim.deepcopy(state.stats)
end

-- Status and log ----------------------------------------------------------------------------

--- Lines describing the server and the last completion.
function M.status_lines()
  local c = client()
  local s = state.status or {}
  local lines = { ("speclsp: %s%s"):format(c and "running" or "not running", c and (" (client " .. c.id .. ")") or "") }
  table.insert(lines, ("models: %s (%s)"):format(s.state or "unknown", s.message or "-"))
  if s.model then
    table.insert(lines, ("target: %s  draft: %s  device: %s"):format(s.model, tostring(s.draftModel), tostring(s.device)))
  end
  if s.lastLatencyMs then
    local acceptance = (type(s.acceptance) == "number") and ("%.0f%%"):format(100 * s.acceptance) or "-"
    table.insert(lines, ("last completion: %.1f ms, %.2f tokens/pass, acceptance %s"):format(
      s.lastLatencyMs, s.tokensPerPass or 0, acceptance))
  end
  local st = state.stats
  table.insert(lines, ("requests %d, cancelled %d, shown %d, accepted %d"):format(
    st.requests, st.cancelled, st.shown, st.accepted))
  return lines
end

--- The server's log lines (one latency line per request), oldest first.
function M.log_lines()
  return vim.deepcopy(state.log)
end

local function open_scratch(lines, name)
  -- A scratch buffer (buftype=nofile from the start), so the server is never attached to it.
  local bufnr = vim.api.nvim_create_buf(false, true)
  vim.bo[bufnr].bufhidden = "wipe"
  pcall(vim.api.nvim_buf_set_name, bufnr, name)
  vim.cmd("botright split")
  vim.api.nvim_win_set_buf(0, bufnr)
  vim.api.nvim_buf_set_lines(bufnr, 0, -1, false, lines)
  vim.bo[bufnr].modifiable = false
end

-- Starting the server -----------------------------------------------------------------------

local function handlers()
  return {
    ["speclsp/status"] = function(_, result)
      state.status = result
    end,
    -- A suggestion written ahead (server setting nextEdit.suggestAhead): preview it when the user still
    -- sees that buffer at that version and no preview or request is in the way; the request that
    -- shows it is answered from the one written.
    ["speclsp/nextEditReady"] = function(_, result, ctx)
      vim.schedule(function()
        local bufnr = vim.api.nvim_get_current_buf()
        local ready = result and result.textDocument
        if not ready or vim.uri_from_bufnr(bufnr) ~= ready.uri or next_edit.visible() or next_edit.pending()
            or vim.lsp.util.buf_versions[bufnr] ~= ready.version then
          return
        end
        local c = vim.lsp.get_client_by_id(ctx.client_id)
        if c and vim.lsp.buf_is_attached(bufnr, c.id) then
          next_edit.request(c, state.config.next_edit)
        end
      end)
    end,
    ["window/logMessage"] = function(err, result, ctx, config)
      if result and result.message then
        push_log(result.message)
      end
      return vim.lsp.handlers["window/logMessage"](err, result, ctx, config)
    end,
  }
end

--- The workspace folder for a file `name` (a buffer name; "" for the current directory): the nearest
--- directory at or above it that holds one of `markers` (default: the configured `root_markers`), or
--- nil when none does (the server then starts without a workspace folder and indexes nothing).
function M.root_for(name, markers)
  markers = markers or (state.config or defaults).root_markers
  local dir = name ~= "" and vim.fn.fnamemodify(name, ":p:h") or vim.fn.getcwd()
  while true do
    for _, marker in ipairs(markers) do
      if vim.loop.fs_stat(dir .. "/" .. marker) then -- a directory (.git) or a file (.git of a worktree)
        return dir
      end
    end
    local parent = vim.fn.fnamemodify(dir, ":h")
    if parent == dir then
      return nil
    end
    dir = parent
  end
end

local function lsp_config(bufnr)
  return {
    name = "speclsp",
    cmd = state.config.cmd,
    root_dir = M.root_for(vim.api.nvim_buf_get_name(bufnr)), -- nil: single-file mode
    -- An empty Lua table would be sent as a JSON array.
    init_options = next(state.config.settings) and state.config.settings or vim.empty_dict(),
    handlers = handlers(),
    on_exit = function()
      state.client_id = nil
      state.pending = nil
      vim.schedule(next_edit.reset) -- on_exit runs in a libuv callback: no buffer API there
    end,
  }
end

local function wanted(bufnr)
  if vim.bo[bufnr].buftype ~= "" then
    return false
  end
  local filetypes = state.config.filetypes
  return filetypes == nil or vim.tbl_contains(filetypes, vim.bo[bufnr].filetype)
end

--- Start the server if needed and attach it to `bufnr`.
function M.attach(bufnr)
  bufnr = (bufnr == nil or bufnr == 0) and vim.api.nvim_get_current_buf() or bufnr
  if not wanted(bufnr) then
    return
  end
  if vim.lsp.start then -- 0.8+: reuses a running client with the same name and root
    state.client_id = vim.lsp.start(lsp_config(bufnr), { bufnr = bufnr })
  else -- 0.7
    if not client() then
      state.client_id = vim.lsp.start_client(lsp_config(bufnr))
    end
    if state.client_id then
      vim.lsp.buf_attach_client(bufnr, state.client_id)
    end
  end
  if state.client_id and use_builtin() then
    pcall(vim.lsp.inline_completion.enable, true, { bufnr = bufnr })
  end
end

local function map_next_edit_keys()
  local opts = state.config.next_edit
  for name, fn in pairs({ accept = "accept_next_edit", dismiss = "dismiss_next_edit" }) do
    local lhs = opts[name]
    if lhs and lhs ~= "" then
      vim.keymap.set("n", lhs, function()
        if next_edit.visible() then
          return ("<Cmd>lua require('speclsp').%s()<CR>"):format(fn)
        end
        return lhs
      end, { expr = true, desc = "speclsp: " .. name .. " the next edit" })
    end
  end
end

local function map_keys()
  local keys = state.config.keys
  local actions = { accept = "accept", accept_word = "accept_word", accept_line = "accept_line" }
  for name, fn in pairs(actions) do
    local lhs = keys[name]
    if lhs and lhs ~= "" then
      vim.keymap.set("i", lhs, function()
        if M.visible() or use_builtin() then
          return ("<Cmd>lua require('speclsp').%s()<CR>"):format(fn)
        end
        return lhs
      end, { expr = true, desc = "speclsp: " .. name })
    end
  end
  if keys.dismiss and keys.dismiss ~= "" then
    vim.keymap.set("i", keys.dismiss, function()
      if M.visible() then
        return "<Cmd>lua require('speclsp').dismiss()<CR>"
      end
      return keys.dismiss
    end, { expr = true, desc = "speclsp: dismiss" })
  end
end

--- Configure speclsp: start the server for matching buffers and map the keys.
function M.setup(opts)
  state.config = vim.tbl_deep_extend("force", defaults, opts or {})
  local group = vim.api.nvim_create_augroup("speclsp", { clear = true })
  vim.api.nvim_create_autocmd({ "FileType", "BufEnter" }, {
    group = group,
    callback = function(args) M.attach(args.buf) end,
  })
  if not use_builtin() then
    vim.api.nvim_create_autocmd({ "InsertEnter", "TextChangedI" }, { group = group, callback = on_text_changed })
    vim.api.nvim_create_autocmd("CursorMovedI", { group = group, callback = on_cursor_moved })
    vim.api.nvim_create_autocmd({ "InsertLeave", "BufLeave" }, { group = group, callback = function() M.dismiss() end })
  end
  -- A preview whose buffer changed no longer shows what would be applied.
  vim.api.nvim_create_autocmd({ "TextChanged", "TextChangedI" }, { group = group, callback = next_edit.check_stale })
  map_keys()
  map_next_edit_keys()
  vim.api.nvim_create_user_command("SpeclspStatus", function()
    local c = client()
    if c then
      -- Refresh from the server; print what we know now either way.
      c.request("speclsp/status", {}, function(err, result)
        if not err and result then
          state.status = result
        end
      end)
    end
    vim.api.nvim_echo({ { table.concat(M.status_lines(), "\n") } }, false, {})
  end, { desc = "speclsp: model state and the last completion's latency" })
  vim.api.nvim_create_user_command("SpeclspLog", function()
    open_scratch(#state.log > 0 and state.log or { "(no server log yet)" }, "speclsp://log")
  end, { desc = "speclsp: the server's latency trace" })
  vim.api.nvim_create_user_command("SpeclspNextEdit", function()
    M.next_edit()
  end, { desc = "speclsp: suggest the next edit around the cursor (preview; accept or dismiss)" })
  if vim.api.nvim_get_current_buf() then
    M.attach(vim.api.nvim_get_current_buf())
  end
end

return M
