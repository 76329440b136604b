"""vLLM's own KV event classes, loaded from a vLLM wheel without installing vLLM.

`vllm/distributed/kv_events.py` needs only msgspec to define and encode its structs; its other
imports (vLLM's config, logger and network helpers, zmq) are stubbed. Shared by
`make_vllm_golden.py` (golden payloads) and `zmq_publisher.py` (the end-to-end test's engine).

Positional variants: vLLM up to 0.32 and SGLang encode each event as a tagged tuple
(`array_like=True`). `positional(cls, upto)` rebuilds one of vLLM's classes with the same fields,
tag and defaults, encoded as a tuple; `upto` keeps only the first fields (SGLang's `BlockStored`
ends at `lora_id`).
"""

import importlib.util
import subprocess
import sys
import tempfile
import types
import zipfile
from pathlib import Path

import msgspec

KV_EVENTS = "vllm/distributed/kv_events.py"


def _stub(name, **attrs):
    module = types.ModuleType(name)
    module.__dict__.update(attrs)
    sys.modules[name] = module
    return module


def download_wheel(dest, version=None):
    """`pip download vllm --no-deps` (the newest release unless `version`), returns the wheel."""
    spec = f"vllm=={version}" if version else "vllm"
    subprocess.run(
        [sys.executable, "-m", "pip", "download", spec, "--no-deps", "-q", "-d", str(dest)],
        check=True,
    )
    wheels = sorted(Path(dest).glob("vllm-*.whl"))
    if not wheels:
        raise SystemExit(f"pip download {spec} gave no wheel in {dest}")
    return wheels[-1]


def load(wheel):
    """The kv_events module of `wheel`, and the wheel's vLLM version."""
    with zipfile.ZipFile(wheel) as zf:
        if KV_EVENTS not in zf.namelist():
            raise SystemExit(f"{wheel} has no {KV_EVENTS}")
        source = zf.read(KV_EVENTS).decode()
    version = Path(wheel).name.split("-")[1]

    class _Anything:
        def __init__(self, *args, **kwargs):
            pass

    for name in ["vllm", "vllm.config", "vllm.utils", "vllm.v1", "vllm.v1.core"]:
        _stub(name)
    _stub("vllm.config.kv_events", KVEventsConfig=_Anything)
    _stub("vllm.logger", init_logger=lambda name: __import__("logging").getLogger(name))
    _stub(
        "vllm.utils.network_utils",
        get_ip=lambda: "127.0.0.1",
        get_tcp_uri=lambda ip, port: f"tcp://{ip}:{port}",
        is_valid_ipv6_address=lambda ip: False,
        split_zmq_path=lambda path: tuple(path.rsplit(":", 2)),
    )
    _stub("vllm.v1.core.kv_cache_utils", ExternalBlockHash=bytes | int)
    if "zmq" not in sys.modules:
        try:
            import zmq  # noqa: F401  (the real one, when installed)
        except ImportError:
            _stub("zmq")

    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "kv_events.py"
        path.write_text(source)
        spec = importlib.util.spec_from_file_location("vllm_kv_events", path)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
    return module, version


def positional(cls, upto=None):
    """`cls` re-declared as a tagged tuple (`array_like=True`), optionally cut after `upto`
    fields: how vLLM before the map encoding and SGLang put events on the wire."""
    fields = []
    for field in msgspec.structs.fields(cls)[:upto]:
        if field.required:
            fields.append((field.name, field.type))
        else:
            fields.append((field.name, field.type, field.default))
    return msgspec.defstruct(
        cls.__name__,
        fields,
        array_like=True,
        omit_defaults=True,
        tag=cls.__name__,
    )


def int_hash(digest):
    """vLLM's `maybe_convert_block_hash`: a digest as the integer it publishes in int mode."""
    return int.from_bytes(digest, byteorder="big") & ((1 << 64) - 1)
