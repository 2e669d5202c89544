"""Options, seeding and determinism of the zoo's builds and exports."""

from __future__ import annotations

import subprocess
import sys

import pytest
import torch

import graphs
from placer.errors import PlacerError


def test_same_options_give_the_same_bytes(small_export, tmp_path, small):
    again = graphs.export("rnnlm", tmp_path / "again.onnx", **small["rnnlm"])
    assert again.read_bytes() == small_export("rnnlm").read_bytes()


def test_same_options_give_the_same_bytes_in_a_fresh_process(small_export, tmp_path, small):
    # a new interpreter has fresh global state (tracer counters, hash seeds): bytes must not depend on it
    target = tmp_path / "fresh.onnx"
    code = f"import graphs; graphs.export('transformer', {str(target)!r}, **{small['transformer']!r})"
    subprocess.run([sys.executable, "-c", code], check=True, timeout=120)
    assert target.read_bytes() == small_export("transformer").read_bytes()


def test_different_options_give_different_graphs(small_export, tmp_path, small):
    longer = graphs.export("rnnlm", tmp_path / "longer.onnx", **{**small["rnnlm"], "seq_len": 4})
    assert longer.read_bytes() != small_export("rnnlm").read_bytes()


def test_weights_are_seeded_and_the_callers_rng_is_left_alone(small):
    torch.manual_seed(123)
    before = torch.rand(1)
    torch.manual_seed(123)
    first, inputs_a = graphs.build_model("nmt", **small["nmt"])
    second, inputs_b = graphs.build_model("nmt", **small["nmt"])
    assert torch.rand(1) == before  # building drew nothing from the caller's stream
    for (name, a), (_, b) in zip(first.state_dict().items(), second.state_dict().items()):
        assert torch.equal(a, b), name
    assert all(torch.equal(a, b) for a, b in zip(inputs_a, inputs_b))


def test_models_are_built_in_eval_mode(small):
    model, _ = graphs.build_model("transformer", **small["transformer"])
    assert not model.training


def test_export_records_name_and_options_in_the_model(small_export):
    import onnx

    meta = {p.key: p.value for p in onnx.load(small_export("nmt")).metadata_props}
    assert meta["placer.zoo.name"] == "nmt"
    assert meta["placer.zoo.options"] == '{"batch": 2, "seq_len": 3, "vocab": 50}'


@pytest.mark.parametrize("options, message", [
    ({"seq_len": 4}, "inception_v3 has no option seq_len"),
    ({"batch": 0}, "positive integer"),
    ({"batch": 2.5}, "positive integer"),
])
def test_bad_options_are_refused_with_the_valid_ones(options, message):
    with pytest.raises(PlacerError, match=message):
        graphs.build_model("inception_v3", **options)


def test_unknown_model_lists_the_zoo():
    with pytest.raises(PlacerError, match="inception_v3, resnet50, rnnlm, nmt, transformer"):
        graphs.build_model("alexnet")


def test_parameter_count_and_input_shapes_follow_the_options():
    assert graphs.input_shapes("nmt", batch=4, seq_len=7) == {"src_tokens": (4, 7), "tgt_tokens": (4, 7)}
    small = graphs.parameter_count("transformer", layers=1, vocab=10)
    model, _ = graphs.build_model("transformer", layers=1, vocab=10, seq_len=4)
    assert small == sum(p.numel() for p in model.parameters())
