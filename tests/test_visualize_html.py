"""Tests of tfattn.visualize.html.write_html: the self-contained page."""

import html
import json
import os
import re
import shutil
import subprocess

import numpy as np
import pytest
import tensorflow as tf

from tests import bounds
from tfattn.visualize.html import write_html

SOURCE = [
    "the",
    "animal",
    "didn't",
    "cross",
    "the",
    "street",
    '</script><b>x&y"',
]
TARGET = ["das", "Tier", "@DATA@", "<s>"]
S, T, H = len(SOURCE), len(TARGET), 3
DATA_RE = re.compile(
    r'<script type="application/json" id="attn-data">(.*?)</script>', re.S
)
# The page prints each weight rounded to this many decimals (in its
# shortest form: 0.25, 0 and 1 as ints).
DECIMALS = 4


def figures(weights):
    """The page's weights as the figures they are: DECIMALS decimals."""
    return [f"{x:.{DECIMALS}f}" for x in np.ravel(np.array(weights, float))]


def softmax(shape, seed, causal=False):
    x = np.random.default_rng(seed).normal(size=shape) * 2
    if causal:
        x = np.where(np.tril(np.ones(shape[-2:], bool)), x, -np.inf)
    e = np.exp(x - x.max(-1, keepdims=True))
    return e / e.sum(-1, keepdims=True)


def make_scores(layers=2):
    return {
        "encoder": [softmax((H, S, S), i) for i in range(layers)],
        "decoder": [
            softmax((H, T, T), 10 + i, causal=True) for i in range(layers)
        ],
        "cross": [softmax((H, T, S), 20 + i) for i in range(layers)],
    }


def embedded(text):
    (payload,) = DATA_RE.findall(text)
    return json.loads(payload)


def read(path):
    with open(path, encoding="utf-8") as f:
        return f.read()


def test_writes_one_self_contained_file(tmp_path):
    scores = make_scores()
    out_dir = tmp_path / "missing" / "dir"
    path = write_html(scores, SOURCE, TARGET, out_dir / "attention.html")
    assert path == str(out_dir / "attention.html")
    assert os.path.isabs(path)
    assert os.listdir(out_dir) == ["attention.html"]  # no temporary file left
    text = read(path)
    for token in SOURCE + TARGET:
        assert html.escape(token) in text
    data = embedded(text)
    assert data["source"] == SOURCE and data["target"] == TARGET
    assert data["kinds"] == ["encoder", "decoder", "cross"]
    for kind, layers in scores.items():
        assert len(data["weights"][kind]) == len(layers)
        for got, want in zip(data["weights"][kind], layers):
            bounds.assert_printed(np.ravel(want), figures(got))


def test_batch_axis_and_tensors_give_the_same_page(tmp_path):
    scores = make_scores()
    plain = read(write_html(scores, SOURCE, TARGET, tmp_path / "a.html"))
    batched = {k: [a[None] for a in v] for k, v in scores.items()}
    tensors = {
        k: [tf.constant(a, tf.float32) for a in v] for k, v in batched.items()
    }
    batched_path = write_html(batched, SOURCE, TARGET, tmp_path / "b.html")
    assert read(batched_path) == plain
    tensor_path = write_html(tensors, SOURCE, TARGET, tmp_path / "c.html")
    data = embedded(read(tensor_path))
    for kind, layers in scores.items():
        for got, want in zip(data["weights"][kind], layers):
            # The float32 tensors' rounding (1), then the printing.
            bounds.assert_printed(np.ravel(want), figures(got),
                                  dtype="float32")


def test_only_present_kinds(tmp_path):
    scores = {"cross": make_scores()["cross"]}
    data = embedded(
        read(write_html(scores, SOURCE, TARGET, tmp_path / "x.html"))
    )
    assert data["kinds"] == ["cross"] and list(data["weights"]) == ["cross"]


def test_no_network_access(tmp_path):
    text = read(write_html(make_scores(), SOURCE, TARGET, tmp_path / "a.html"))
    assert not re.search(
        r"""(src|href)\s*=\s*["']?\s*(https?:|//)""", text, re.I
    )
    assert not re.search(r"""url\(\s*["']?\s*(https?:|//)""", text, re.I)
    assert not re.search(r"<link|@import|<img|<iframe", text, re.I)
    assert not re.search(r"<script[^>]*\bsrc\s*=", text, re.I)


def test_hostile_tokens_cannot_break_the_page(tmp_path):
    text = read(write_html(make_scores(), SOURCE, TARGET, tmp_path / "a.html"))
    assert len(re.findall(r"<script\b", text)) == 2
    assert len(re.findall(r"</script", text, re.I)) == 2
    assert "&lt;/script&gt;&lt;b&gt;x&amp;y&quot;" in text
    assert "<b>" not in text
    data = embedded(text)  # the JSON is whole and still parses
    assert data["source"][-1] == '</script><b>x&y"'
    assert data["target"][2] == "@DATA@"  # not filled in as a placeholder


def test_rewrites_an_existing_file(tmp_path):
    path = tmp_path / "a.html"
    path.write_text("old")
    write_html(make_scores(1), SOURCE, TARGET, path)
    assert embedded(read(path))["kinds"] == ["encoder", "decoder", "cross"]


def _bad(**changes):
    scores = make_scores()
    scores.update(changes)
    return scores


BAD = {
    "not_a_dict": ([np.zeros((H, S, S))], SOURCE, TARGET, "scores", None),
    "empty_dict": ({}, SOURCE, TARGET, "scores", None),
    "unknown_kind": (
        _bad(self=[np.zeros((H, S, S))]),
        SOURCE,
        TARGET,
        "scores",
        "self",
    ),
    "empty_layers": (
        _bad(decoder=[]),
        SOURCE,
        TARGET,
        "scores['decoder']",
        None,
    ),
    "not_a_list": (
        _bad(cross=np.zeros((H, T, S))),
        SOURCE,
        TARGET,
        "scores['cross']",
        None,
    ),
    "rank_2": (
        _bad(encoder=[np.zeros((S, S))]),
        SOURCE,
        TARGET,
        "scores['encoder'][0]",
        f"({S}, {S})",
    ),
    "rank_5": (
        _bad(encoder=[np.zeros((1, 1, H, S, S))]),
        SOURCE,
        TARGET,
        "scores['encoder'][0]",
        f"(1, 1, {H}, {S}, {S})",
    ),
    "batch_2": (
        _bad(encoder=[np.zeros((2, H, S, S))]),
        SOURCE,
        TARGET,
        "scores['encoder'][0]",
        f"(2, {H}, {S}, {S})",
    ),
    "cross_shape": (
        _bad(cross=[np.zeros((H, T, S)), np.zeros((H, S, T))]),
        SOURCE,
        TARGET,
        "scores['cross'][1]",
        f"layer 1 to have (T_q, T_k) = ({T}, {S})",
    ),
    "heads_differ": (
        _bad(encoder=[np.zeros((H, S, S)), np.zeros((H + 1, S, S))]),
        SOURCE,
        TARGET,
        "scores['encoder']",
        f"[{H}, {H + 1}]",
    ),
    "not_weights": (
        _bad(encoder=[np.full((H, S, S), 3.0)]),
        SOURCE,
        TARGET,
        "scores['encoder'][0]",
        "[0, 1]",
    ),
    "nan": (
        _bad(encoder=[np.full((H, S, S), np.nan)]),
        SOURCE,
        TARGET,
        "scores['encoder'][0]",
        "not all finite",
    ),
    "source_str": (
        make_scores(),
        " ".join(SOURCE),
        TARGET,
        "source_tokens",
        None,
    ),
    "target_ints": (make_scores(), SOURCE, [1, 2, 3, 4], "target_tokens", None),
    "tokens_short": (
        make_scores(),
        SOURCE[:-1],
        TARGET,
        "scores['encoder'][0]",
        f"({S - 1}, {S - 1})",
    ),
}


@pytest.mark.parametrize("case", sorted(BAD))
def test_bad_input_raises_and_writes_nothing(tmp_path, case):
    scores, source, target, name, detail = BAD[case]
    path = tmp_path / "out" / "a.html"
    with pytest.raises(ValueError, match=re.escape(f"argument `{name}`")) as e:
        write_html(scores, source, target, path)
    assert "write_html" in str(e.value)
    if detail:
        assert detail in str(e.value)
    assert not os.path.exists(tmp_path / "out")


def test_path_is_a_directory(tmp_path):
    with pytest.raises(ValueError, match="argument `path`") as e:
        write_html(make_scores(), SOURCE, TARGET, tmp_path)
    assert str(tmp_path) in str(e.value)
    assert os.listdir(tmp_path) == []


def _browser():
    for name in (
        "chromium",
        "chromium-browser",
        "google-chrome",
        "google-chrome-stable",
    ):
        if shutil.which(name):
            return shutil.which(name)
    return None


def _dump_dom(browser, path, query, profile):
    result = subprocess.run(
        [
            browser,
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--no-first-run",
            f"--user-data-dir={profile}",
            "--dump-dom",
            f"file://{path}?{query}",
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr[-2000:]
    return result.stdout


def _lines(dom):
    return re.findall(r"<line [^>]*>", dom)


@pytest.mark.slow
def test_page_renders_in_a_headless_browser(tmp_path):
    browser = _browser()
    if browser is None:
        pytest.skip("no chromium, chromium-browser or google-chrome on PATH")
    scores = make_scores()
    del scores["decoder"]
    path = write_html(scores, SOURCE, TARGET, tmp_path / "a.html")
    profile = tmp_path / "profile"

    first = _dump_dom(browser, path, "", profile)
    assert 'data-ready="1"' in first
    assert 'data-state="encoder/0/all"' in first
    options = re.findall(r'<select id="kind">(.*?)</select>', first, re.S)[0]
    kinds = re.findall(r'<option value="(\w+)"', options)
    assert kinds == ["encoder", "cross"]
    assert len(re.findall(r'<span><i style="background', first)) == H  # legend
    assert len(_lines(first)) > S  # every head's lines
    assert '&lt;/script&gt;&lt;b&gt;x&amp;y"</text>' in first  # token drawn

    other = _dump_dom(browser, path, "kind=cross&layer=1&head=0", profile)
    assert 'data-state="cross/1/0"' in other
    lines = _lines(other)
    assert lines and lines != _lines(first)
    assert all('data-h="0"' in line for line in lines)
    assert len(lines) <= T * S and "head 0" not in other  # no legend

    hovered = _dump_dom(
        browser, path, "kind=cross&layer=1&head=0&hover=q1", profile
    )
    assert '<svg id="view" width' in hovered and 'class="focus"' in hovered
    lit = [line for line in _lines(hovered) if 'class="hl"' in line]
    assert lit and all('data-q="1"' in line for line in lit)
