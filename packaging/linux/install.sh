#!/bin/sh
# Install GRPO Desktop for the current user (no root): the app folder goes to ~/.local/opt,
# a launcher to ~/.local/bin, the menu entry and the icon to ~/.local/share.
# Uninstall: ./install.sh --uninstall
set -eu
here=$(cd "$(dirname "$0")" && pwd)
prefix=${XDG_DATA_HOME:-$HOME/.local/share}
opt=$HOME/.local/opt/grpo-desktop
bin=$HOME/.local/bin
if [ "${1:-}" = "--uninstall" ]; then
  rm -rf "$opt" "$bin/grpo-desktop" "$prefix/applications/grpo-desktop.desktop" \
         "$prefix/icons/hicolor/256x256/apps/grpo-desktop.png"
  echo "GRPO Desktop removed."
  exit 0
fi
mkdir -p "$opt" "$bin" "$prefix/applications" "$prefix/icons/hicolor/256x256/apps"
rm -rf "$opt"
cp -R "$here/grpo-desktop" "$opt"
ln -sf "$opt/grpo-desktop" "$bin/grpo-desktop"
cp "$here/grpo-desktop-256.png" "$prefix/icons/hicolor/256x256/apps/grpo-desktop.png"
sed "s|^Exec=grpo-desktop|Exec=$opt/grpo-desktop|" "$here/grpo-desktop.desktop" \
  > "$prefix/applications/grpo-desktop.desktop"
command -v update-desktop-database >/dev/null 2>&1 && update-desktop-database "$prefix/applications" || true
echo "GRPO Desktop installed: find it in your applications menu, or run $bin/grpo-desktop"
