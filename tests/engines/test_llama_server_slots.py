"""llama-server's slot context: what posenc_cli.engines.llamacpp.server_slot_context says llama-server gives a slot,
against llama.cpp's own llama-server (as vendored by llama-cpp-python 0.3.36) serving the committed passkey GGUF
(``context_length`` 256), and the ``--override-kv ARCH.context_length`` that `posenc scale --engine llama.cpp` adds
past it. Without the override, linear and NTK flags get slots of 256: the requests past them are refused. YaRN flags
re-adjust the training context themselves (``yarn_orig_ctx / float32(1/scale)``, truncated, after the override is
read): x4 gives 1,024, x3.5 gives 895 whatever the override, which posenc says instead of adding one."""

from __future__ import annotations

import json
import shlex
import subprocess
import sys
import urllib.request
from pathlib import Path

import llama_server
import pytest

from posenc_cli.engines.llamacpp import NAME, render, server_slot_context
from posenc_cli.engines.target import Rendering
from posenc_cli.rope.scaling import make_request

REPO = Path(__file__).resolve().parents[2]
TRAINED = 256  # the passkey GGUF's llama.context_length
# (posenc scale arguments, the target they ask for, the slot llama-server gives with the printed flags)
CASES = [(("linear", "--factor", "4"), 1024, 1024), (("ntk", "--factor", "4"), 1024, 1024),
         (("yarn", "--factor", "4"), 1024, 1024), (("yarn", "--factor", "3.5"), 896, 895),
         (("yarn", "--target", "2k"), 2048, 2048)]
needs_server = pytest.mark.skipif(llama_server.llama_server_binary() is None,
                                  reason="needs llama.cpp's llama-server (POSENC_LLAMA_SERVER or on PATH)")


def scale(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "posenc_cli", "scale", *args, "--config", str(llama_server.FIXTURE),
                           "--engine", "llama.cpp"], capture_output=True, text=True, check=True, cwd=REPO)


def printed(*args: str) -> list[str]:
    return shlex.split(scale(*args).stdout.strip())


def served_slot(flags: list[str]) -> int:
    with llama_server.serve(llama_server.native_command(*flags)) as url:
        with urllib.request.urlopen(url.removesuffix("/v1") + "/props", timeout=10) as r:
            return int(json.load(r)["default_generation_settings"]["n_ctx"])


def without_override(flags: list[str]) -> list[str]:
    if "--override-kv" not in flags:
        return flags
    i = flags.index("--override-kv")
    assert flags[i + 1].startswith("llama.context_length=int:")
    return flags[:i] + flags[i + 2:]


@needs_server
@pytest.mark.parametrize(("args", "target", "served"), CASES)
def test_the_printed_flags_give_a_slot_the_whole_target_or_say_why_not(args: tuple[str, ...], target: int,
                                                                       served: int) -> None:
    flags = printed(*args)
    assert served_slot(flags) == served == server_slot_context(flags, target, TRAINED, None)
    said = f"llama-server gives each slot {served:,} tokens, not {target:,}"
    assert (said in scale(*args).stderr) == (served < target)


@needs_server
@pytest.mark.parametrize(("args", "target", "served"), CASES)
def test_without_the_override_the_slot_is_what_posenc_says(args: tuple[str, ...], target: int, served: int) -> None:
    """The cap as modelled, against the server: where posenc adds the override, llama-server needs it."""
    flags = printed(*args)
    bare = without_override(flags)
    slot = served_slot(bare)
    assert slot == server_slot_context(bare, target, TRAINED, None)
    assert (slot < served) == (bare != flags)  # the override is added exactly where it changes the slot


def test_slot_context_rules() -> None:
    linear = ["--rope-scaling", "linear", "--rope-scale", "4", "--ctx-size", "16384"]
    assert server_slot_context(linear, 16384, 4096, None) == 4096
    assert server_slot_context(linear, 2048, 4096, None) == 2048
    yarn = ["--rope-scaling", "yarn", "--rope-scale", "4", "--yarn-orig-ctx", "32768", "--ctx-size", "131072"]
    assert server_slot_context(yarn, 131072, 32768, None) == 131072
    # a GGUF converted from the Qwen card's config already carries factor 4: llama.cpp does not re-adjust, and its
    # context_length is the config's max_position_embeddings
    assert server_slot_context(yarn, 131072, 32768, 4.0) == 32768
    odd = ["--rope-scaling", "yarn", "--rope-scale", "3.5", "--yarn-orig-ctx", "8192", "--ctx-size", "28672"]
    assert server_slot_context(odd, 28672, 8192, None) == 28671  # float32 1/3.5, then truncated
    # the re-adjustment comes after the override is read
    assert server_slot_context([*odd, "--override-kv", "llama.context_length=int:28672"], 28672, 8192, None) == 28671
    assert server_slot_context([*linear, "--override-kv", "llama.context_length=int:16384"], 16384, 4096, None) == 16384


def test_only_llama_server_gets_the_override() -> None:
    req = make_request("linear", original_max=4096, factor=4.0)
    shown, _ = render(Rendering(req, NAME))
    assert shown.endswith("--ctx-size 16384 --override-kv ARCH.context_length=int:16384")
    python, _ = render(Rendering(req, "llama-cpp-python"))
    assert "context_length" not in python and "--n_ctx 16384" in python
    inside = render(Rendering(make_request("yarn", original_max=4096, factor=4.0), NAME))[0]
    assert "--override-kv" not in inside
