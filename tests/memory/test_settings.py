"""Engine settings typed under the engine's own names, after the model or as --set ENGINE:SETTING=VALUE."""

from __future__ import annotations

import pytest
from toy_memory import MEMORY as TOY

from posenc_cli.errors import PosencError
from posenc_cli.memory.settings import engine_args, given_settings


@pytest.mark.parametrize(("words", "expected"), [
    (["--block", "32"], {"block": "32"}),
    (["--block=32", "--kv", "q8"], {"block": "32", "kv": "q8"}),
    (["--swa-full"], {"swa_full": "on"}),
    (["--swa-full=off", "slots=2"], {"swa_full": "off", "slots": "2"}),
])
def test_engine_args(words: list[str], expected: dict[str, str]) -> None:
    assert engine_args(TOY, words) == expected


def test_values_are_parsed_and_checked_against_the_engines_choices() -> None:
    assert TOY.settings_for({"--block": "32", "kv": "q8", "--swa-full": "on"}) == {
        "block": 32, "kv": "q8", "slots": 1, "swa_full": True}
    with pytest.raises(PosencError, match=r"--block '48' is not allowed; use one of: 16, 32, 256"):
        TOY.settings_for({"block": "48"})
    with pytest.raises(PosencError, match=r"--slots '0' must be at least 1"):
        TOY.settings_for({"slots": "0"})
    with pytest.raises(PosencError, match=r"--swa-full 'maybe': use on or off"):
        TOY.settings_for({"swa_full": "maybe"})


def test_unknown_settings_and_missing_values_name_what_is_allowed() -> None:
    with pytest.raises(PosencError, match=r"toy has no memory setting '--cache-type-k'; its settings: --block, --kv"):
        engine_args(TOY, ["--cache-type-k", "q8_0"])
    with pytest.raises(PosencError, match="--block needs a value"):
        engine_args(TOY, ["--block"])


def test_several_engines_take_settings_by_engine_only() -> None:
    models = {"toy": TOY, "other": TOY}
    assert given_settings(models, [], ["toy:--kv=q8"]) == {"toy": {"kv": "q8"}, "other": {}}
    with pytest.raises(PosencError, match="with several engines, give each engine's setting as set ENGINE"):
        given_settings(models, ["--kv", "q8"], [])
    with pytest.raises(PosencError, match="use ENGINE:SETTING=VALUE with ENGINE one of the engines asked for"):
        given_settings(models, [], ["vllm:--block-size=32"])
