"""``agentgrpo serve``: an OpenAI-compatible chat-completions server for a checkpoint or Hub model.

``generate`` decodes batches of requests with one model (a worker thread owns it);
``request`` checks a request body as vLLM does; ``hermes`` reads tool calls out of the
reply as vLLM's hermes parser does; ``app`` is the FastAPI application (``/v1/models``,
``/v1/chat/completions`` with ``tools`` in and ``tool_calls`` out, streamed or not);
``cli`` starts it on uvicorn.
Needs the ``serve`` extra: ``pip install -e '.[serve]'`` in the clone (fastapi, uvicorn).
"""
