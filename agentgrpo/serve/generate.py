"""Batched generation for the server: one worker thread owns the model, requests queue up.

``BatchGenerator.submit(GenerationRequest)`` returns a ``Future``. The worker takes the
first waiting request and every other one already queued (up to ``max_batch``) and
decodes them together: prompts left-padded, one forward per token for the whole batch,
each row with its own temperature, top-p, token limit and seeded generator, until every
row has stopped. So concurrent requests are safe (only the worker touches the model)
and share forward passes.
"""
from __future__ import annotations

import queue
import threading
from concurrent.futures import Future
from typing import Any

from agentgrpo.policy.generate import GenerationRequest, generate_batch


class BatchGenerator:
    """The model's only user: a daemon thread decoding queued requests in batches."""

    def __init__(self, model: Any, pad_token_id: int, max_batch: int = 8, use_autocast: bool = True):
        self.model = model
        self.pad_token_id = pad_token_id
        self.max_batch = max_batch
        self.use_autocast = use_autocast
        self._queue: queue.Queue[GenerationRequest | None] = queue.Queue()
        self._thread = threading.Thread(target=self._work, name="generator", daemon=True)
        self._thread.start()

    def submit(self, request: GenerationRequest) -> Future:
        self._queue.put(request)
        return request.future

    def close(self) -> None:
        self._queue.put(None)

    def _work(self) -> None:
        while True:
            first = self._queue.get()
            if first is None:
                return
            batch = [first]
            while len(batch) < self.max_batch:
                try:
                    item = self._queue.get_nowait()
                except queue.Empty:
                    break
                if item is None:
                    self._queue.put(None)  # close after this batch
                    break
                batch.append(item)
            try:
                results = generate_batch(self.model, batch, self.pad_token_id, self.use_autocast)
            except Exception as e:  # a failed batch fails its requests, never the server
                for request in batch:
                    request.future.set_exception(e)
                continue
            for request, result in zip(batch, results):
                request.future.set_result(result)
