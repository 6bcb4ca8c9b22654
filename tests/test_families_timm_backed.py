"""Models whose towers are timm models: they run when the timm extra is installed.

timm needs a torchvision built for the installed torch (see pyproject's `timm` extra); without
it these tests skip, and the sweep records such models as a skip `missing_package`.
"""

from __future__ import annotations

import pytest

pytest.importorskip("timm")

from tests.family_support import assert_trains, run_default  # noqa: E402


@pytest.mark.parametrize(
    "model_type",
    ["timm_wrapper", "pe_video", "pe_audio_video", "perception_lm", "fast_vlm"],
)
def test_timm_backed_family_trains(model_type):
    assert_trains(run_default(model_type))


def test_perception_lm_prompt_holds_one_token_per_projected_patch():
    run = run_default("perception_lm")
    image_id = run.model.config.image_token_id
    tokens = int((run.inputs["input_ids"] == image_id).sum())
    side = 64 // 16  # the PE ViT's 64 px input in 16 px patches
    assert tokens == 2 * side * side
