"""``agentgrpo serve``: an OpenAI-compatible chat-completions server for a checkpoint or Hub model.

``generate`` decodes batches of requests with one model (a worker thread owns it);
``app`` is the FastAPI application (``/v1/models``, ``/v1/chat/completions`` with
``tools`` in and ``tool_calls`` out, in our Hermes format); ``cli`` starts it on uvicorn.
Needs the ``serve`` extra: ``pip install 'agentgrpo[serve]'`` (fastapi, uvicorn).
"""
