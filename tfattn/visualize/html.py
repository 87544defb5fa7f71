"""One self-contained HTML page that shows where a translation model attends.

In the manner of Tensor2Tensor's attention view: the query tokens in a column
on the left, the key tokens in a column on the right, and a line from each
query to each key whose opacity is the attention weight. Controls pick the
kind of attention, the layer and one head or "all heads" (each head in its
own colour, with a legend); hovering a token keeps its lines and dims the
others. The page needs no network: the weights are JSON in a <script>, and
all CSS and JS are inline. `?kind=cross&layer=1&head=0` (head may be `all`)
in the URL picks the initial view, and `&hover=q2` (or `k0`) highlights a
token's lines as if hovered.

`scores` maps a kind to a list with one array per layer (layer 0 first),
S = source length, T = target length, H = heads:

    "encoder"  source attends to source   [H, S, S]
    "decoder"  target attends to target   [H, T, T]  (causal)
    "cross"    target queries, source keys [H, T, S]

An array may also carry a batch axis of 1: [1, H, T_q, T_k].
"""

import html
import json
import os
import re

import numpy as np

from tfattn.utils.files import write_text_atomically
from tfattn.utils.validation import invalid_argument

__all__ = ["KINDS", "write_html"]

KINDS = ("encoder", "decoder", "cross")
# Kind -> (query tokens, key tokens): which sentence is on which side.
_SIDES = {"encoder": ("source", "source"), "decoder": ("target", "target"),
          "cross": ("target", "source")}
_DECIMALS = 4
_CONTEXT = "write_html"


class _Text(str):
    """Echoes without quotes in error messages: `x=shape (2, 3, 4)`."""

    def __repr__(self):
        return str(self)


def _check_tokens(name, tokens):
    if (not isinstance(tokens, (list, tuple))
            or not all(isinstance(t, str) for t in tokens)):
        raise invalid_argument(name, "a list of str", tokens, _CONTEXT)
    return [str(t) for t in tokens]


def _check_layer(kind, i, array, lengths):
    name = f"scores[{kind!r}][{i}]"
    try:
        a = np.asarray(array, dtype=np.float64)
    except (TypeError, ValueError):
        raise invalid_argument(name, "an array of attention weights",
                               array, _CONTEXT) from None
    shape = _Text(f"shape {a.shape}")
    if a.ndim == 4 and a.shape[0] == 1:
        a = a[0]
    if a.ndim != 3 or 0 in a.shape:
        raise invalid_argument(
            name, "an array of shape [H, T_q, T_k] or [1, H, T_q, T_k] "
            "(a batch axis of 1) with no empty axis", shape, _CONTEXT)
    queries, keys = _SIDES[kind]
    expected = (lengths[queries], lengths[keys])
    if a.shape[1:] != expected:
        raise invalid_argument(
            name, f"the {kind!r} weights of layer {i} to have (T_q, T_k) = "
            f"{expected} ({queries} queries, {keys} keys: the token counts)",
            shape, _CONTEXT)
    finite = a[np.isfinite(a)]
    if finite.size < a.size or finite.min() < -1e-3 or finite.max() > 1.001:
        span = (f"values in [{finite.min():.4g}, {finite.max():.4g}]"
                if finite.size else "no finite values")
        if finite.size < a.size:
            span += ", not all finite"
        raise invalid_argument(
            name, "attention weights in [0, 1] (softmax outputs)",
            _Text(span), _CONTEXT)
    return np.clip(a, 0.0, 1.0)


def _check_scores(scores, lengths):
    expected = "a non-empty dict with keys among " + ", ".join(
        map(repr, KINDS))
    if not isinstance(scores, dict) or not scores:
        raise invalid_argument("scores", expected, scores, _CONTEXT)
    unknown = [k for k in scores if k not in KINDS]
    if unknown:
        raise invalid_argument("scores", expected + f" (unknown: {unknown})",
                               sorted(map(str, scores)), _CONTEXT)
    checked = {}
    for kind in KINDS:
        if kind not in scores:
            continue
        layers = scores[kind]
        if not isinstance(layers, (list, tuple)) or not layers:
            raise invalid_argument(
                f"scores[{kind!r}]", "a non-empty list with one array per "
                "layer", layers, _CONTEXT)
        arrays = [_check_layer(kind, i, a, lengths)
                  for i, a in enumerate(layers)]
        heads = [a.shape[0] for a in arrays]
        if len(set(heads)) > 1:
            raise invalid_argument(
                f"scores[{kind!r}]", "layers with the same number of heads",
                _Text(f"heads per layer {heads}"), _CONTEXT)
        checked[kind] = arrays
    return checked


def _script_json(data):
    """JSON that cannot end or confuse the <script> element it sits in."""
    text = json.dumps(data, ensure_ascii=True, separators=(",", ":"))
    # `<`, `>` and `&` occur only inside JSON strings, where \uXXXX is valid.
    return (text.replace("<", "\\u003c").replace(">", "\\u003e")
            .replace("&", "\\u0026"))


def _rounded(a):
    """Nested lists of floats, or ints where a weight rounds to 0 or 1."""
    r = np.round(a, _DECIMALS).tolist()

    def compact(x):
        if isinstance(x, list):
            return [compact(y) for y in x]
        return int(x) if x in (0.0, 1.0) else x
    return compact(r)


def write_html(scores, source_tokens, target_tokens, path):
    """Writes the attention page to `path` (atomically).

    Args:
        scores: dict. Kind (`"encoder"`, `"decoder"`, `"cross"`) to a list
            (one per layer) of [H, T_q, T_k] arrays or tensors (or
            [1, H, T_q, T_k]) of weights in [0, 1].
        source_tokens, target_tokens: lists of str, S and T long.
        path: str or path-like. The .html file to write (its directory is
            created if missing).

    Returns:
        str, the absolute `path`.

    Raises:
        ValueError: tokens that are not lists of str, `scores` of an
            unknown kind, shape or range, or a `path` that is a directory
            (the message names the argument).
    """
    source = _check_tokens("source_tokens", source_tokens)
    target = _check_tokens("target_tokens", target_tokens)
    checked = _check_scores(scores, {"source": len(source),
                                     "target": len(target)})
    if not isinstance(path, (str, os.PathLike)) or not os.fspath(path):
        raise invalid_argument("path", "a file path", path, _CONTEXT)
    path = os.path.abspath(os.fspath(path))
    if os.path.isdir(path):
        raise invalid_argument("path", "a file path, not an existing "
                               "directory", path, _CONTEXT)
    data = {"source": source, "target": target, "kinds": list(checked),
            "weights": {k: [_rounded(a) for a in v]
                        for k, v in checked.items()}}
    fills = {"SOURCE": html.escape(" ".join(source)),
             "TARGET": html.escape(" ".join(target)),
             "DATA": _script_json(data)}
    # One pass, so a token that reads "@DATA@" is not filled in itself.
    text = re.sub(r"@(SOURCE|TARGET|DATA)@", lambda m: fills[m.group(1)],
                  _TEMPLATE)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    write_text_atomically(path, text)
    return path


_TEMPLATE = """<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<title>Attention</title>
<style>
body { font-family: sans-serif; margin: 16px; color: #222; }
.controls label { margin-right: 14px; }
.sentence { font-family: monospace; margin: 2px 0; }
#legend span { display: inline-block; margin-right: 10px; font-size: 12px; }
#legend i { display: inline-block; width: 12px; height: 12px;
  margin-right: 3px; vertical-align: middle; }
svg text { font: 13px monospace; cursor: default; fill: #222; }
svg line { stroke-width: 2; }
svg.focus line { opacity: 0.06; }
svg.focus line.hl { opacity: 1; }
svg text.hl { font-weight: bold; fill: #000; }
</style>
</head>
<body>
<p class="sentence">source: @SOURCE@</p>
<p class="sentence">target: @TARGET@</p>
<div class="controls">
<label>Attention <select id="kind"></select></label>
<label>Layer <select id="layer"></select></label>
<label>Head <select id="head"></select></label>
</div>
<p id="legend"></p>
<svg id="view" width="10" height="10"></svg>
<script type="application/json" id="attn-data">@DATA@</script>
<script>
(function () {
  "use strict";
  var D = JSON.parse(document.getElementById("attn-data").textContent);
  var NS = "http" + "://www.w3.org/2000/svg";
  var LABELS = {encoder: "encoder self-attention (source \\u2192 source)",
    decoder: "decoder self-attention (target \\u2192 target)",
    cross: "encoder-decoder (target \\u2192 source)"};
  var ROW = 22, GAP = 260, CHAR = 8;
  var kindSel = document.getElementById("kind");
  var layerSel = document.getElementById("layer");
  var headSel = document.getElementById("head");
  var svg = document.getElementById("view");
  var legend = document.getElementById("legend");

  function option(sel, value, text) {
    var o = document.createElement("option");
    o.value = String(value); o.textContent = text; sel.appendChild(o);
  }
  function heads(kind) { return D.weights[kind][0].length; }
  function colour(h, n) {
    if (n === 1) return "#1f77b4";
    return "hsl(" + Math.round(360 * h / n) + ",75%,42%)";
  }
  function fill(kind, layer, head) {
    layerSel.innerHTML = ""; headSel.innerHTML = "";
    D.weights[kind].forEach(function (_, i) { option(layerSel, i, i); });
    option(headSel, "all", "all heads");
    for (var h = 0; h < heads(kind); h++) option(headSel, h, h);
    layerSel.value = String(Math.min(layer, D.weights[kind].length - 1));
    var h = parseInt(head, 10);
    headSel.value = String(head) !== String(h) || h < 0 || h >= heads(kind) ?
      "all" : String(h);
  }
  function el(name, attrs, parent) {
    var e = document.createElementNS(NS, name);
    for (var a in attrs) e.setAttribute(a, attrs[a]);
    parent.appendChild(e);
    return e;
  }
  function focus(side, i, on) {
    svg.classList.toggle("focus", on);
    var sel = "line[data-" + side + '="' + i + '"], text.' + side +
      '[data-i="' + i + '"]';
    svg.querySelectorAll(sel).forEach(function (e) {
      e.classList.toggle("hl", on);
    });
  }
  function draw() {
    var kind = kindSel.value, layer = +layerSel.value, head = headSel.value;
    var W = D.weights[kind][layer], n = W.length;
    var qt = kind === "encoder" ? D.source : D.target;
    var kt = kind === "decoder" ? D.target : D.source;
    var width = function (t) {
      return CHAR * Math.max.apply(null, t.map(function (s) {
        return s.length; })) + 12; };
    var lw = width(qt), rw = width(kt), count = 0;
    svg.innerHTML = "";
    svg.setAttribute("width", lw + GAP + rw);
    svg.setAttribute("height", ROW * Math.max(qt.length, kt.length) + 10);
    var y = function (i) { return ROW * i + ROW / 2 + 5; };
    var g = el("g", {}, svg);
    var shown = head !== "all" ? [+head] :
      W.map(function (_, h) { return h; });
    shown.forEach(function (h) {
      W[h].forEach(function (row, q) {
        row.forEach(function (w, k) {
          if (w < 0.005) return;
          el("line", {x1: lw + 4, y1: y(q) - 4, x2: lw + GAP - 4,
            y2: y(k) - 4, stroke: colour(h, n), "stroke-opacity": w,
            "data-q": q, "data-k": k, "data-h": h}, g);
          count++;
        });
      });
    });
    [[qt, "q", lw, "end"], [kt, "k", lw + GAP, "start"]].forEach(function (c) {
      c[0].forEach(function (tok, i) {
        var t = el("text", {x: c[2], y: y(i), "text-anchor": c[3],
          "class": c[1], "data-i": i}, svg);
        t.textContent = tok;
        t.addEventListener("mouseenter", function () {
          focus(c[1], i, true); });
        t.addEventListener("mouseleave", function () {
          focus(c[1], i, false); });
      });
    });
    legend.innerHTML = "";
    if (head === "all") {
      for (var h = 0; h < n; h++) {
        var s = document.createElement("span");
        var sw = document.createElement("i");
        sw.style.background = colour(h, n);
        s.appendChild(sw); s.appendChild(document.createTextNode("head " + h));
        legend.appendChild(s);
      }
    }
    document.body.setAttribute("data-state", kind + "/" + layer + "/" + head);
    document.body.setAttribute("data-lines", String(count));
    document.body.setAttribute("data-ready", "1");
  }
  function show(kind, layer, head) {
    if (D.kinds.indexOf(kind) < 0) kind = D.kinds[0];
    kindSel.value = kind;
    fill(kind, Math.max(0, parseInt(layer, 10) || 0),
         head === undefined || head === null ? "all" : head);
    draw();
  }
  D.kinds.forEach(function (k) { option(kindSel, k, LABELS[k]); });
  kindSel.addEventListener("change", function () {
    show(kindSel.value, layerSel.value, headSel.value); });
  layerSel.addEventListener("change", draw);
  headSel.addEventListener("change", draw);
  window.attentionView = {show: show};
  var p = new URLSearchParams(window.location.search);
  show(p.get("kind"), p.get("layer"), p.get("head"));
  var hover = /^([qk])([0-9]+)$/.exec(p.get("hover") || "");
  if (hover) focus(hover[1], +hover[2], true);
})();
</script>
</body>
</html>
"""
