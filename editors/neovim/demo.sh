#!/usr/bin/env bash
# Capture a terminal screen of Neovim showing speclsp ghost text (used for the README):
#   editors/neovim/demo.sh [SPECLSP_COMMAND]   (default: speclsp from PATH)
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
server="${1:-speclsp}"
work="$(mktemp -d)"
trap 'tmux kill-session -t speclsp-demo 2>/dev/null || true; rm -rf "$work"' EXIT
cat > "$work/shapes.py" <<'PY'
import math


class Circle:
    def __init__(self, radius):
        self.radius = radius

    def area(self):
        return math.pi * self.radius ** 2

    def perimeter(self):
        return 2 * math.pi * self.radius


class Square:
    def __init__(self, side):
        self.side = side

PY
tmux new-session -d -s speclsp-demo -x 90 -y 24 \
  "nvim -u NONE -i NONE -n --cmd 'set rtp^=$here' --cmd 'syntax on' \
   -c \"lua require('speclsp').setup({ cmd = { '$server', 'serve' } })\" $work/shapes.py"
sleep 8                                   # the server loads the models
# Type a method header and the start of its body, as a user would, then wait for the ghost text.
tmux send-keys -t speclsp-demo 'G' 'o' '    def area(self):' Enter '    return self.'
before="$(tmux capture-pane -p -t speclsp-demo)"
for _ in $(seq 1 100); do
  sleep 0.2
  [ "$(tmux capture-pane -p -t speclsp-demo)" != "$before" ] && break
done
sleep 0.5
tmux capture-pane -p -t speclsp-demo
