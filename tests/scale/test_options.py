"""The options of a scaling asked for by name (posenc_cli.scale.options): parsed into the request they make."""

from __future__ import annotations

import pytest

from posenc_cli.errors import PosencError
from posenc_cli.scale.options import ScaleOptions, scale_request


def test_scale_request_parses_the_lengths_and_needs_an_original_length() -> None:
    req = scale_request("yarn", ScaleOptions(original_max="4k", target="16k"), theta=1e4, head_dim=64)
    assert (req.original_max, req.target, req.factor) == (4096, 16384, 4.0)
    with pytest.raises(PosencError, match="pass original_max, e.g. 4k"):
        scale_request("yarn", ScaleOptions(factor=2))
