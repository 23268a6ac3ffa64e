"""``agentgrpo serve`` as a real process on 127.0.0.1 for tests (the URL read from its first stdout line)."""
from __future__ import annotations

import os
import re
import subprocess
import sys
import threading
from pathlib import Path

URL_LINE = re.compile(r"^agentgrpo serve: (\S+) at (http://\S+)$")


class ServeProcess:
    """``python -m agentgrpo.cli serve MODEL --port 0 ...``; ``url`` and ``name`` once it listens."""

    def __init__(self, model: str | Path, *args: str, startup_s: float = 180.0):
        command = [sys.executable, "-m", "agentgrpo.cli", "serve", str(model), "--port", "0", *args]
        env = {**os.environ, "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1"}
        self.process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
        self.stderr: list[str] = []
        threading.Thread(target=self._drain_stderr, daemon=True).start()
        found: list[re.Match] = []
        reader = threading.Thread(target=lambda: found.append(URL_LINE.match(self.process.stdout.readline().strip())),
                                  daemon=True)
        reader.start()
        reader.join(startup_s)
        if not found or found[0] is None:
            self.close()
            raise RuntimeError(f"agentgrpo serve did not start: {''.join(self.stderr)[-2000:]}")
        self.name, self.url = found[0].group(1), found[0].group(2)

    def _drain_stderr(self) -> None:
        for line in self.process.stderr:
            self.stderr.append(line)

    def close(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
