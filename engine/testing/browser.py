"""The real-browser setup shared by the e2e test and the browser benchmark (Debian chromium +
chromium-driver at /usr/bin; never a downloaded browser), and a free localhost port."""

from __future__ import annotations

import shutil
import socket

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
CHROMEDRIVER = shutil.which("chromedriver") or "/usr/bin/chromedriver"
FLAGS = (
    "--headless --no-sandbox --disable-gpu --disable-quic --no-first-run --disable-background-networking "
    "--disable-component-update --disable-sync --disable-dev-shm-usage --enable-unsafe-swiftshader "
    "--window-size=1600,1300"
).split()


def free_port() -> int:
    """A localhost TCP port nobody listens on right now (bind to port 0 and read it back)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


__all__ = ["CHROMEDRIVER", "CHROMIUM", "FLAGS", "free_port"]
