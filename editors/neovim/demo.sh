#!/usr/bin/env bash
# Capture a terminal screen of Neovim showing speclsp ghost text (used for the README):
#   editors/neovim/demo.sh [SPECLSP_COMMAND]   (default: speclsp from PATH)
# It opens a copy of the standard library's json/decoder.py, opens a new line under the header of
# `_decode_uXXXX` (line 59), and waits in insert mode for the completion to appear as ghost text.
# The server runs its defaults (model `auto`: Qwen2.5-Coder 1.5B with the 0.5B as draft when the model
# packs are installed, else the starter pair). Environment:
#   SPECLSP_DEMO_SETTINGS  a Lua table of server settings, strings in single quotes, e.g.
#                          "{ model = { target = 'qwen2.5-coder-0.5b', draft = 'none' } }" (default: none, the server's defaults)
#   SPECLSP_DEMO_LOAD_S    most seconds to wait for the server to report its models ready (default 600)
#   SPECLSP_DEMO_WAIT_S    most seconds to wait for the ghost text after typing (default 300; on a
#                          2-core CPU the 1.5B takes tens of seconds for a cold document)
# The screen goes to stdout; the server's log line for the request (latency, tokens per pass) to stderr.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
server="${1:-speclsp}"
empty="{}"
settings="${SPECLSP_DEMO_SETTINGS:-$empty}"
load_s="${SPECLSP_DEMO_LOAD_S:-600}"
wait_s="${SPECLSP_DEMO_WAIT_S:-300}"
work="$(mktemp -d)"
trap 'tmux kill-session -t speclsp-demo 2>/dev/null || true; rm -rf "$work"' EXIT
python="$(dirname "$(command -v "$server")")/python"
[ -x "$python" ] || python=python3
cp "$("$python" -c 'import json, os; print(os.path.dirname(json.__file__))')/decoder.py" "$work/decoder.py"
sock="$work/nvim.sock"
tmux new-session -d -s speclsp-demo -x 100 -y 20 \
  "nvim -u NONE -i NONE -n --listen $sock --cmd 'set rtp^=$here' --cmd 'syntax on' \
   -c \"lua require('speclsp').setup({ cmd = { '$server', 'serve' }, settings = $settings })\" +55 $work/decoder.py"
lua() {                                           # evaluate a Lua expression in that Neovim (it answers on stderr)
  nvim --server "$sock" --remote-expr "luaeval(\"$1\")" 2>&1 || true
}
for _ in $(seq 1 "$load_s"); do                   # the server loads the models
  sleep 1
  [ "$(lua "(require('speclsp').server_status() or {}).state or ''")" = ready ] && break
done
tmux send-keys -t speclsp-demo '59G' 'o'              # a new line in the body of _decode_uXXXX
for _ in $(seq 1 $((wait_s * 5))); do
  sleep 0.2
  [ "$(lua "require('speclsp').visible() and 1 or 0")" = 1 ] && break
done
sleep 0.5
tmux capture-pane -p -t speclsp-demo
lua "table.concat(require('speclsp').log_lines(), string.char(10))" | grep 'req=' >&2 || true
