"""A progress bar with the key numbers (tqdm), silent when disabled or not a terminal job."""
from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

from tqdm.auto import tqdm


class _Bar:
    def __init__(self, bar: tqdm | None):
        self._bar = bar

    def update(self, n: int = 1, **postfix: Any) -> None:
        if self._bar is not None:
            if postfix:
                self._bar.set_postfix(postfix, refresh=False)
            self._bar.update(n)

    def write(self, message: str) -> None:
        """Print a line above the bar (or plainly without one)."""
        if self._bar is not None:
            self._bar.write(message)
        else:
            print(message, flush=True)


@contextlib.contextmanager
def progress_bar(total: int, description: str, enabled: bool = True, initial: int = 0) -> Iterator[_Bar]:
    bar = tqdm(total=total, desc=description, initial=initial, dynamic_ncols=True) if enabled else None
    try:
        yield _Bar(bar)
    finally:
        if bar is not None:
            bar.close()
