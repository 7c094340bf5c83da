"""Render the SVG master icon to the PNG sizes, a Windows .ico and a macOS .icns.

    python packaging/make_icons.py          # writes resources/icons/*.png, .ico, .icns

Uses Qt's SVG renderer (already a dependency) and writes ICO and ICNS containers directly: both
formats can hold PNG images, so no imaging library is needed. Run it after editing the SVG and
commit the results (the installers and the window read the generated files).
"""

from __future__ import annotations

import os
import struct
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ICONS = os.path.join(os.path.dirname(HERE), "resources", "icons")
MASTER = os.path.join(ICONS, "grpo-desktop.svg")
# The running app reads its window icon from the package (importlib.resources), so the sizes it
# needs are also written there.
PACKAGE_ICONS = os.path.join(os.path.dirname(HERE), "grpo_desktop", "resources", "icons")
PACKAGE_SIZES = (32, 64, 256)
PNG_SIZES = (16, 24, 32, 48, 64, 128, 256, 512)
ICO_SIZES = (16, 24, 32, 48, 64, 128, 256)
ICNS_TYPES = {16: b"icp4", 32: b"icp5", 64: b"icp6", 128: b"ic07", 256: b"ic08", 512: b"ic09"}


def render_png(size: int) -> bytes:
    from PySide6.QtCore import QBuffer, QByteArray, QIODevice, Qt
    from PySide6.QtGui import QImage, QPainter
    from PySide6.QtSvg import QSvgRenderer

    image = QImage(size, size, QImage.Format.Format_ARGB32)
    image.fill(Qt.GlobalColor.transparent)
    painter = QPainter(image)
    painter.setRenderHint(QPainter.RenderHint.Antialiasing)
    QSvgRenderer(MASTER).render(painter)
    painter.end()
    data = QByteArray()
    buf = QBuffer(data)
    buf.open(QIODevice.OpenModeFlag.WriteOnly)
    image.save(buf, "PNG")
    return bytes(data)


def ico(images: dict[int, bytes]) -> bytes:
    """ICONDIR + ICONDIRENTRYs + PNG payloads (Windows Vista and later read PNG entries)."""
    header = struct.pack("<HHH", 0, 1, len(images))
    offset = 6 + 16 * len(images)
    entries, payload = b"", b""
    for size, png in sorted(images.items()):
        dim = 0 if size >= 256 else size
        entries += struct.pack("<BBBBHHII", dim, dim, 0, 0, 1, 32, len(png), offset)
        payload += png
        offset += len(png)
    return header + entries + payload


def icns(images: dict[int, bytes]) -> bytes:
    body = b"".join(
        ICNS_TYPES[s] + struct.pack(">I", 8 + len(p)) + p for s, p in sorted(images.items())
    )
    return b"icns" + struct.pack(">I", 8 + len(body)) + body


def main() -> int:
    from PySide6.QtGui import QGuiApplication

    os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
    app = QGuiApplication.instance() or QGuiApplication(sys.argv[:1])  # noqa: F841
    pngs = {s: render_png(s) for s in PNG_SIZES}
    for size, png in pngs.items():
        with open(os.path.join(ICONS, f"grpo-desktop-{size}.png"), "wb") as fh:
            fh.write(png)
    os.makedirs(PACKAGE_ICONS, exist_ok=True)
    for size in PACKAGE_SIZES:
        with open(os.path.join(PACKAGE_ICONS, f"grpo-desktop-{size}.png"), "wb") as fh:
            fh.write(pngs[size])
    with open(os.path.join(ICONS, "grpo-desktop.ico"), "wb") as fh:
        fh.write(ico({s: pngs[s] for s in ICO_SIZES}))
    with open(os.path.join(ICONS, "grpo-desktop.icns"), "wb") as fh:
        fh.write(icns({s: pngs[s] for s in ICNS_TYPES}))
    print(f"wrote {len(pngs)} PNGs, grpo-desktop.ico and grpo-desktop.icns to {ICONS}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
