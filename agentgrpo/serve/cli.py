"""``agentgrpo serve CHECKPOINT|HUB_ID``: the model behind an OpenAI-compatible API (FastAPI on uvicorn).

Bound to 127.0.0.1 unless ``--host`` says otherwise; ``--port 0`` picks a free port.
The first line on stdout is ``agentgrpo serve: MODEL at http://HOST:PORT/v1`` once the
socket is bound (scripts and tests read the URL from it). Point ``agentgrpo eval
--policy openai endpoint.base_url=URL endpoint.model=MODEL`` or an LLM user
(``env.user.base_url``) at it. On GPUs vLLM serves faster: docs/real-models.md gives
the flags our tool-call format needs.
"""
from __future__ import annotations

import argparse
import importlib.util
import socket
import sys

from agentgrpo.config import ConfigError

SERVE_INSTALL = "pip install -e '.[serve]' in the agentgrpo clone  (fastapi, uvicorn)"


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("serve", help="OpenAI-compatible server of a checkpoint or Hub model")
    parser.add_argument("model", help="checkpoint directory (full or LoRA adapter), Hub id, .gguf file or preset")
    parser.add_argument("--host", default="127.0.0.1", help="address to bind (default 127.0.0.1: this machine only)")
    parser.add_argument("--port", type=int, default=8000, help="port (0: any free port; default 8000)")
    parser.add_argument("--served-model-name", default=None, help="the model id clients send (default: MODEL)")
    parser.add_argument("--device", default="auto", help="cpu, cuda, cuda:N, mps or auto (default)")
    parser.add_argument("--dtype", choices=("float32", "bfloat16"), default=None,
                        help="weights dtype (default: bfloat16 on CUDA, float32 elsewhere)")
    parser.add_argument("--max-new-tokens", type=int, default=1024, help="longest completion (default 1024)")
    parser.add_argument("--max-batch", type=int, default=8, help="requests decoded together (default 8)")
    parser.add_argument("--prompt-style", choices=("full", "compact"), default=None,
                        help="system prompt format (default: the checkpoint's agentgrpo.json, else full)")
    parser.add_argument("--log-level", default="warning", help="uvicorn log level (default warning)")
    parser.add_argument("--write-chat-template", metavar="FILE",
                        help="write the chat template vLLM needs for this checkpoint (--chat-template FILE) and exit")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    if args.write_chat_template:
        return write_chat_template(args)
    missing = [name for name in ("fastapi", "uvicorn") if importlib.util.find_spec(name) is None]
    if missing:
        raise ConfigError(f"agentgrpo serve needs {', '.join(missing)}: {SERVE_INSTALL}")
    if args.max_new_tokens < 1 or args.max_batch < 1:
        raise ConfigError("--max-new-tokens and --max-batch must be >= 1")
    from agentgrpo.policy.preflight import check_device, check_policy_source

    check_device(args.device, "--device")
    check_policy_source(args.model, "model", "pass a checkpoint directory (e.g. runs/sft/final) or a Hub id")
    sock = bind(args.host, args.port)  # a busy port fails before minutes of model loading
    served = load_served_model(args)
    host, port = sock.getsockname()[:2]
    shown = f"[{host}]" if ":" in host else host
    print(f"agentgrpo serve: {served.name} at http://{shown}:{port}/v1", flush=True)
    import uvicorn

    from agentgrpo.serve.app import create_app

    server = uvicorn.Server(uvicorn.Config(create_app(served), log_level=args.log_level))
    server.run(sockets=[sock])
    return 0


def write_chat_template(args: argparse.Namespace) -> int:
    """The checkpoint's template wrapped to render vLLM's tools and tool calls as we trained (serve/template.py)."""
    from pathlib import Path

    from agentgrpo.policy.hf import load_tokenizer, read_agent_config
    from agentgrpo.policy.preflight import check_policy_source
    from agentgrpo.serve.template import vllm_chat_template

    check_policy_source(args.model, "model", "pass a checkpoint directory (e.g. runs/sft/final) or a Hub id")
    style = args.prompt_style or read_agent_config(args.model)["prompt_style"]
    path = Path(args.write_chat_template)
    path.write_text(vllm_chat_template(load_tokenizer(args.model), style))
    print(f"wrote {path} (prompt style {style}); serve with: vllm serve {args.model} --enable-auto-tool-choice "
          f"--tool-call-parser hermes --chat-template {path}")
    return 0


def bind(host: str, port: int) -> socket.socket:
    """A listening-ready TCP socket on ``host:port`` (a one-line error if the port is taken)."""
    try:
        family, kind, proto, _, address = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)[0]
        sock = socket.socket(family, kind, proto)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(address)
        sock.listen(128)  # clients may connect (and wait) from now on, while the model loads
    except OSError as e:
        raise ConfigError(f"cannot listen on {host}:{port} ({e.strerror or e}); choose another --port or --host") \
            from None
    return sock


def load_served_model(args: argparse.Namespace):
    """The model on its device (LoRA adapters merged), its tokenizer and prompt style."""
    import torch

    from agentgrpo.policy.device import resolve_device
    from agentgrpo.policy.hf import load_policy, read_agent_config
    from agentgrpo.serve.app import ServedModel

    device = resolve_device(args.device, "--device")
    dtype = args.dtype or ("bfloat16" if device.type == "cuda" else "float32")
    model, tokenizer = load_policy(args.model, getattr(torch, dtype), device=device)
    style = args.prompt_style or read_agent_config(args.model)["prompt_style"]
    name = args.served_model_name or args.model
    print(f"loaded {args.model} on {device} ({dtype}, prompt style {style})", file=sys.stderr, flush=True)
    return ServedModel(name, model, tokenizer, prompt_style=style, max_new_tokens=args.max_new_tokens,
                       max_batch=args.max_batch)
