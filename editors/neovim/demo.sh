#!/usr/bin/env bash
# Capture a terminal screen of Neovim showing speclsp ghost text (used for the README):
#   editors/neovim/demo.sh [SPECLSP_COMMAND]   (default: speclsp from PATH)
# It opens a copy of the standard library's json/decoder.py, opens a new line under the header of
# `_decode_uXXXX` (line 59), and waits in insert mode for the completion to appear as ghost text
# (on a CPU the default Qwen2.5-Coder pair takes several seconds to load and to answer).
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
server="${1:-speclsp}"
work="$(mktemp -d)"
trap 'tmux kill-session -t speclsp-demo 2>/dev/null || true; rm -rf "$work"' EXIT
python="$(dirname "$(command -v "$server")")/python"
[ -x "$python" ] || python=python3
cp "$("$python" -c 'import json, os; print(os.path.dirname(json.__file__))')/decoder.py" "$work/decoder.py"
tmux new-session -d -s speclsp-demo -x 100 -y 20 \
  "nvim -u NONE -i NONE -n --cmd 'set rtp^=$here' --cmd 'syntax on' \
   -c \"lua require('speclsp').setup({ cmd = { '$server', 'serve' } })\" +55 $work/decoder.py"
sleep 15                                          # the server loads the models
tmux send-keys -t speclsp-demo '59G' 'o'              # a new line in the body of _decode_uXXXX
before="$(tmux capture-pane -p -t speclsp-demo)"
for _ in $(seq 1 600); do                         # up to 2 minutes
  sleep 0.2
  [ "$(tmux capture-pane -p -t speclsp-demo)" != "$before" ] && break
done
sleep 0.5
tmux capture-pane -p -t speclsp-demo
