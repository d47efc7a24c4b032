"""Hardware profiles: the shipped ones load, and every malformed file is named with its line."""

from __future__ import annotations

import textwrap

import pytest

from perftests import profiles
from perftests.errors import ConfigError, UnknownProfileError
from perftests.service import resolve_placeholders

GOOD = """\
name: {name}
engine: llamacpp
service:
  launch:
    argv: ["server", "--port", "{{port}}"]
sweep:
  contexts: [64, 1024]
defaults:
  repeats: 3
"""


def write(tmp_path, name, text):
    p = tmp_path / f"{name}.yaml"
    p.write_text(textwrap.dedent(text))
    return p


def test_shipped_profiles_load():
    known = profiles.available()
    assert {"cpu-reference", "cpu-reference-spec", "pro6000"} <= set(known)
    for name in known:
        profiles.load(name)


def test_pro6000_is_the_sglang_ddtree_service():
    p = profiles.load("pro6000")
    argv = " ".join(p.service.launch.argv)
    assert p.service.engine == "sglang"
    for part in (
        "sglang.launch_server",
        "--tp 8",
        "--speculative-algorithm DDTREE",
        "--attention-backend triton",
        "--reasoning-parser kimi_k2",
        "--tool-call-parser kimi_k2",
        # A tree, not the PR's default chain (budget unset: block_size - 1, spine mode), on the
        # page size DDTree requires.
        "--speculative-ddtree-budget 32",
        "--page-size 1",
    ):
        assert part in argv
    env = p.service.launch.env
    assert {"SGLANG_DDTREE_MAX_TOPK", "SGLANG_DDTREE_DEPTH_BONUS"} <= set(env)
    assert p.service.launch.startup_timeout_s >= 600  # a 548 GB model takes ~10 min to load


def test_vllm_example_asks_for_what_the_adapter_reads():
    p = profiles.load("vllm-example")
    assert p.service.engine == "vllm"
    from perftests.engines.vllm import VLLMAdapter

    assert VLLMAdapter.launch_problems(p.service.launch.argv) == []


def test_reference_profile_defaults():
    p = profiles.load("cpu-reference")
    assert p.service.engine == "llamacpp"
    assert (p.sweep.short_tokens, p.sweep.long_tokens) == (8, 264)
    assert p.sweep.contexts == tuple(sorted(p.sweep.contexts))
    assert p.defaults.repeats >= 3


def test_unknown_profile_lists_known_ones():
    with pytest.raises(UnknownProfileError) as e:
        profiles.load("h100-nonexistent")
    assert "h100-nonexistent" in str(e.value)
    assert "cpu-reference" in str(e.value) and "pro6000" in str(e.value)


def test_extra_directory_shadows_and_adds(tmp_path):
    write(tmp_path, "mybox", GOOD.format(name="mybox"))
    assert profiles.load("mybox", [tmp_path]).sweep.contexts == (64, 1024)


@pytest.mark.parametrize(
    "text, line, field",
    [
        # malformed YAML: an unclosed flow sequence
        ("name: bad\nengine: llamacpp\nsweep:\n  contexts: [64, 128\n", 5, None),
        # missing required field
        ("name: bad\nservice:\n  url: http://x\nsweep:\n  contexts: [64]\n", 1, "engine"),
        # wrong type, on its own line
        (
            "name: bad\nengine: llamacpp\nservice:\n  url: http://x\nsweep:\n  contexts: many\n",
            6,
            "sweep.contexts",
        ),
        # a negative context length
        (
            "name: bad\nengine: llamacpp\nservice:\n  url: http://x\nsweep:\n  contexts: [64, -5]\n",
            6,
            "sweep.contexts",
        ),
        # unknown field (a typo must not be silently ignored)
        (
            "name: bad\nengine: llamacpp\nservice:\n  url: http://x\n  startup_timout_s: 5\n"
            "sweep:\n  contexts: [64]\n",
            5,
            "service.startup_timout_s",
        ),
        # unknown engine
        ("name: bad\nengine: tgi\nservice:\n  url: http://x\nsweep:\n  contexts: [64]\n", 2, "engine"),
        # a boolean where a number belongs
        (
            "name: bad\nengine: llamacpp\nservice:\n  url: http://x\nsweep:\n  contexts: [64]\n"
            "defaults:\n  repeats: true\n",
            8,
            "defaults.repeats",
        ),
        # tolerance given in percent instead of a fraction
        (
            "name: bad\nengine: llamacpp\nservice:\n  url: http://x\nsweep:\n  contexts: [64]\n"
            "defaults:\n  tolerance: 5\n",
            8,
            "defaults.tolerance",
        ),
        # neither launch nor url
        (
            "name: bad\nengine: llamacpp\nservice:\n  health_path: /health\nsweep:\n  contexts: [64]\n",
            3,
            "service",
        ),
        # argv not a list of strings
        (
            "name: bad\nengine: llamacpp\nservice:\n  launch:\n    argv: server --port 1\n"
            "sweep:\n  contexts: [64]\n",
            5,
            "service.launch.argv",
        ),
    ],
)
def test_malformed_profile_names_file_line_field(tmp_path, text, line, field):
    path = write(tmp_path, "bad", text)
    with pytest.raises(ConfigError) as e:
        profiles.load("bad", [tmp_path])
    msg = str(e.value)
    assert msg.startswith(f"{path}:{line}:"), msg
    if field:
        assert f"field '{field}'" in msg


def test_name_must_match_file(tmp_path):
    write(tmp_path, "boxa", GOOD.format(name="boxb"))
    with pytest.raises(ConfigError, match="differs from the file name"):
        profiles.load("boxa", [tmp_path])


def test_placeholders(monkeypatch):
    monkeypatch.setenv("PT_MODEL_DIR", "/m")
    argv = resolve_placeholders(
        ["x", "--port", "{port}", "--model", "{env:PT_MODEL_DIR}/k2", "--host={host}"],
        host="127.0.0.1",
        port=1234,
    )
    assert argv == ["x", "--port", "1234", "--model", "/m/k2", "--host=127.0.0.1"]
    monkeypatch.delenv("PT_MODEL_DIR")
    with pytest.raises(ConfigError, match="PT_MODEL_DIR"):
        resolve_placeholders(["{env:PT_MODEL_DIR}"], host="h", port=1)
    with pytest.raises(ConfigError, match="unknown placeholder {gpu}"):
        resolve_placeholders(["{gpu}"], host="h", port=1)
