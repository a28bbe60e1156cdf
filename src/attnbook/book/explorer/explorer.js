/*
 * attnbook attention explorer. Plain JavaScript with no dependencies: it reads the weights from
 * the JSON element next to it and builds a heatmap, a token view and a head selector.
 * Weights arrive as integers in units of 10^-decimals, flattened in (frame, layer, head, query,
 * key) order; with frame labels a slider chooses the frame shown. Every explorer on a page that has not started yet is started, so the script works
 * whether the page runs it once per explorer (the book, VS Code) or inserts it later
 * (JupyterLab runs the scripts of a trusted output when it shows it).
 */
(function () {
  "use strict";

  function make(tag, className, text) {
    var node = document.createElement(tag);
    if (className) node.className = className;
    if (text !== undefined) node.textContent = text;
    return node;
  }

  /* A token or head label: cut to a maximum width with an ellipsis by the CSS, so the full text
   * is also its title (and the readout shows it whole). */
  function label(tag, className, text) {
    var node = make(tag, className + " attnx-label", text);
    node.title = text;
    return node;
  }

  function hexToRgb(hex) {
    var n = parseInt(hex.slice(1), 16);
    return [(n >> 16) & 255, (n >> 8) & 255, n & 255];
  }

  function build(root, data) {
    var F = data.frames, L = data.layers, H = data.heads, T = data.queries, S = data.keys;
    var scale = Math.pow(10, data.decimals);
    var top = 1; /* the largest weight, at least one unit, so that an all-zero input draws */
    data.weights.forEach(function (w) { if (w > top) top = w; });
    var state = { frame: 0, layer: 0, head: 0, q: null, k: null, hoverQ: null };
    var prefix = root.id || "attnx";

    function weight(layer, head, q, k) {
      return data.weights[(((state.frame * L + layer) * H + head) * T + q) * S + k];
    }
    function format(w) { return (w / scale).toFixed(data.decimals); }
    function colour(w) {
      var n = data.colours.length;
      return data.colours[Math.min(n - 1, Math.round((w / top) * (n - 1)))];
    }
    function headName(layer, head) {
      var name = data.headLabels[head];
      if (L > 1) name = "layer " + layer + ", " + name;
      if (data.groups) name += " (key/value group " + data.groups[head] + ")";
      return name;
    }

    var cellPx = Math.max(8, Math.min(26, Math.floor(416 / Math.max(T, S))));
    var rowPx = Math.max(T, S) > 30 ? 14 : 22;
    root.style.setProperty("--attnx-cell", cellPx + "px");
    root.style.setProperty("--attnx-row", rowPx + "px");

    if (data.title) root.appendChild(make("div", "attnx-title", data.title));
    var slider = null, frameName = null;
    if (data.frameLabels) {
      var frames = root.appendChild(make("div", "attnx-frames"));
      var sliderLabel = frames.appendChild(make("label", "attnx-frames-name", "frame"));
      slider = frames.appendChild(make("input", "attnx-slider"));
      slider.type = "range";
      slider.min = 0;
      slider.max = F - 1;
      slider.step = 1;
      slider.value = 0;
      slider.id = prefix + "-frame";
      sliderLabel.htmlFor = slider.id;
      frameName = frames.appendChild(label("span", "attnx-frame-label", ""));
      slider.addEventListener("input", function () { selectFrame(+slider.value); });
    }
    var current = root.appendChild(make("div", "attnx-pane-title attnx-current"));
    var readout = root.appendChild(make("div", "attnx-readout"));
    readout.id = prefix + "-readout";
    readout.setAttribute("aria-live", "polite");
    var panes = root.appendChild(make("div", "attnx-panes"));

    /* Heatmap: a label column, then one column per key; the last row holds the key labels. */
    var heatPane = panes.appendChild(make("div", "attnx-pane"));
    heatPane.appendChild(
      make("div", "attnx-pane-title", "heatmap: rows are queries, columns are keys"));
    var grid = heatPane.appendChild(make("div", "attnx-heatmap"));
    grid.style.gridTemplateColumns = "auto repeat(" + S + ", var(--attnx-cell))";
    grid.tabIndex = 0;
    grid.setAttribute("role", "group");
    grid.setAttribute("aria-roledescription", "attention heatmap");
    grid.setAttribute("aria-label", "attention heatmap, " + T + " queries by " + S +
      " keys: arrow keys move the selected query (up and down) and key (left and right)");
    grid.setAttribute("aria-describedby", readout.id);
    var cells = [], queryLabels = [], keyLabels = [];
    for (var q = 0; q < T; q++) {
      queryLabels.push(grid.appendChild(label("div", "attnx-qlabel", data.queryTokens[q])));
      for (var k = 0; k < S; k++) {
        var cell = grid.appendChild(make("div", "attnx-cell"));
        cell.setAttribute("data-q", q);
        cell.setAttribute("data-k", k);
        cells.push(cell);
      }
    }
    grid.appendChild(make("div", "attnx-axis", "query \u2193  key \u2192"));
    for (var kk = 0; kk < S; kk++) {
      keyLabels.push(grid.appendChild(label("div", "attnx-klabel", data.keyTokens[kk])));
    }
    var legend = heatPane.appendChild(make("div", "attnx-legend"));
    legend.appendChild(make("span", "", "0"));
    var bar = legend.appendChild(make("span", "attnx-legend-bar"));
    bar.style.background = "linear-gradient(to right, " + data.colours.join(", ") + ")";
    legend.appendChild(make("span", "", format(top)));
    legend.appendChild(make("span", "attnx-axis", "attention weight, one scale for all heads" +
      (data.frameLabels ? " and frames" : "")));

    /* Token view: queries left, keys right, one line per (query, key) pair. */
    var tokenPane = panes.appendChild(make("div", "attnx-pane"));
    tokenPane.appendChild(make("div", "attnx-pane-title", "tokens: line opacity is the weight"));
    var tokens = tokenPane.appendChild(make("div", "attnx-tokens"));
    var queryColumn = tokens.appendChild(make("div", "attnx-tokcol"));
    var links = tokens.appendChild(make("div", "attnx-links"));
    var keyColumn = tokens.appendChild(make("div", "attnx-tokcol"));
    var queryTokens = data.queryTokens.map(function (token, i) {
      var node = queryColumn.appendChild(label("div", "attnx-tok attnx-tq", token));
      node.setAttribute("data-q", i);
      return node;
    });
    var keyTokens = data.keyTokens.map(function (token, i) {
      var node = keyColumn.appendChild(label("div", "attnx-tok attnx-tk", token));
      node.setAttribute("data-k", i);
      return node;
    });
    var width = 120, height = Math.max(T, S) * rowPx, markup = [];
    for (var lq = 0; lq < T; lq++) {
      markup.push('<g data-q="' + lq + '">');
      for (var lk = 0; lk < S; lk++) {
        markup.push('<line x1="2" x2="' + (width - 2) + '" y1="' + (lq + 0.5) * rowPx +
          '" y2="' + (lk + 0.5) * rowPx + '"></line>');
      }
      markup.push("</g>");
    }
    links.innerHTML = '<svg width="' + width + '" height="' + height + '" aria-hidden="true">' +
      markup.join("") + "</svg>";
    var lineGroups = Array.prototype.slice.call(links.querySelectorAll("g"));

    /* Head selector: one thumbnail per (layer, head), grouped by key/value head for GQA. */
    var thumbs = [];
    if (L * H > 1) {
      var selector = root.appendChild(make("div", "attnx-selector"));
      selector.setAttribute("role", "group");
      selector.setAttribute("aria-label", "choose a layer and head");
      selector.appendChild(make("div", "attnx-pane-title", data.groups ?
        "heads, boxed by the key/value head they share: click one to show it" :
        "heads: click one to show it"));
      for (var layer = 0; layer < L; layer++) {
        var row = selector.appendChild(make("div", "attnx-layer"));
        if (L > 1) row.appendChild(make("div", "attnx-layer-name", "layer " + layer));
        var box = row, boxGroup = null;
        for (var head = 0; head < H; head++) {
          if (data.groups && data.groups[head] !== boxGroup) {
            boxGroup = data.groups[head];
            var group = row.appendChild(make("div", "attnx-group"));
            group.appendChild(make("div", "attnx-group-name", "key/value group " + boxGroup));
            box = group.appendChild(make("div", "attnx-group-heads"));
          }
          thumbs.push(box.appendChild(thumbnail(layer, head)));
        }
      }
    }
    root.appendChild(make("div", "attnx-help",
      "Hover a cell or a query token; click a thumbnail to pick a head. Keyboard: Tab to the " +
      "heatmap, then arrow keys move the selected query (up, down) and key (left, right)." +
      (data.frameLabels ? " Frames: drag the slider, or press [ and ] for the previous and " +
        "next frame." : "")));

    function thumbnail(layer, head) {
      var button = make("button", "attnx-thumb");
      button.type = "button";
      button.setAttribute("data-layer", layer);
      button.setAttribute("data-head", head);
      button.setAttribute("aria-label", "show " + headName(layer, head));
      var canvas = button.appendChild(document.createElement("canvas"));
      canvas.width = S;
      canvas.height = T;
      canvas.style.height = Math.round(48 * Math.min(2, T / S)) + "px";
      button.appendChild(label("span", "attnx-thumb-name", data.headLabels[head]));
      button.addEventListener("click", function () { selectHead(layer, head); });
      return button;
    }

    function paintThumbnail(button) {
      var layer = +button.getAttribute("data-layer"), head = +button.getAttribute("data-head");
      var context = button.querySelector("canvas").getContext("2d");
      if (!context) return;
      var image = context.createImageData(S, T);
      for (var i = 0; i < T * S; i++) {
        var rgb = hexToRgb(colour(weight(layer, head, Math.floor(i / S), i % S)));
        image.data.set([rgb[0], rgb[1], rgb[2], 255], 4 * i);
      }
      context.putImageData(image, 0, 0);
    }

    function describe(q, k, relation) {
      readout.textContent = "";
      readout.appendChild(document.createTextNode("query "));
      readout.appendChild(make("b", "attnx-rq", data.queryTokens[q]));
      readout.appendChild(document.createTextNode(" (row " + q + ")" + relation));
      readout.appendChild(make("b", "attnx-rk", data.keyTokens[k]));
      readout.appendChild(document.createTextNode(" (column " + k + "): weight "));
      readout.appendChild(make("b", "attnx-rw", format(weight(state.layer, state.head, q, k))));
      readout.setAttribute("data-q", q);
      readout.setAttribute("data-k", k);
    }

    function describeCell(q, k) {
      describe(q, k, " \u2192 key ");
    }

    function describeQuery(q) {
      var best = 0;
      for (var k = 1; k < S; k++) {
        if (weight(state.layer, state.head, q, k) > weight(state.layer, state.head, q, best)) {
          best = k;
        }
      }
      describe(q, best, " looks most at key ");
    }

    function describeSelection() {
      if (state.q === null) {
        readout.textContent = "Hover a cell to read its weight.";
        readout.removeAttribute("data-q");
        readout.removeAttribute("data-k");
      } else {
        describeCell(state.q, state.k);
      }
    }

    function paintTokens() {
      var active = state.hoverQ !== null ? state.hoverQ : state.q;
      lineGroups.forEach(function (group, q) {
        group.style.display = active === null || active === q ? "" : "none";
      });
      queryTokens.forEach(function (node, q) {
        node.classList.toggle("attnx-active", q === active);
      });
      keyTokens.forEach(function (node, k) {
        var alpha = active === null ? 0 : weight(state.layer, state.head, active, k) / top;
        node.style.background = alpha > 0 ? "rgba(0, 114, 178, " + alpha.toFixed(3) + ")" : "";
        node.style.color = alpha > 0.5 ? "#fff" : "";
      });
    }

    function paintSelection() {
      cells.forEach(function (cell, i) {
        var q = Math.floor(i / S), k = i % S;
        cell.classList.toggle("attnx-selected", q === state.q && k === state.k);
        cell.classList.toggle("attnx-in-row", q === state.q && k !== state.k);
      });
      queryLabels.forEach(function (node, q) {
        node.classList.toggle("attnx-active", q === state.q);
      });
      keyLabels.forEach(function (node, k) {
        node.classList.toggle("attnx-active", k === state.k);
      });
      root.setAttribute("data-query", state.q === null ? "" : state.q);
      root.setAttribute("data-key", state.k === null ? "" : state.k);
      paintTokens();
    }

    function paintHead() {
      cells.forEach(function (cell, i) {
        var w = weight(state.layer, state.head, Math.floor(i / S), i % S);
        cell.style.background = colour(w);
        cell.setAttribute("data-weight", format(w));
      });
      lineGroups.forEach(function (group, q) {
        Array.prototype.forEach.call(group.childNodes, function (line, k) {
          var opacity = weight(state.layer, state.head, q, k) / top;
          line.setAttribute("stroke-opacity", opacity.toFixed(3));
        });
      });
      thumbs.forEach(function (button) {
        var on = +button.getAttribute("data-layer") === state.layer &&
          +button.getAttribute("data-head") === state.head;
        button.setAttribute("aria-pressed", on ? "true" : "false");
      });
      var shown = "showing " + headName(state.layer, state.head);
      if (data.frameLabels) shown += ", frame " + (state.frame + 1) + " of " + F;
      current.textContent = current.title = shown;
      root.setAttribute("data-layer", state.layer);
      root.setAttribute("data-head", state.head);
      paintTokens();
      describeSelection();
    }

    function select(q, k) {
      state.q = Math.max(0, Math.min(T - 1, q));
      state.k = Math.max(0, Math.min(S - 1, k));
      paintSelection();
      describeSelection();
    }

    function selectFrame(frame) {
      state.frame = Math.max(0, Math.min(F - 1, frame));
      if (slider) {
        slider.value = state.frame;
        slider.setAttribute("aria-valuetext", data.frameLabels[state.frame]);
        frameName.textContent = frameName.title = data.frameLabels[state.frame];
      }
      root.setAttribute("data-frame", state.frame);
      thumbs.forEach(paintThumbnail);
      paintHead();
    }

    function selectHead(layer, head) {
      state.layer = layer;
      state.head = head;
      paintHead();
    }

    grid.addEventListener("mouseover", function (event) {
      var cell = event.target.closest(".attnx-cell");
      if (cell) describeCell(+cell.getAttribute("data-q"), +cell.getAttribute("data-k"));
    });
    grid.addEventListener("mouseleave", describeSelection);
    grid.addEventListener("click", function (event) {
      var cell = event.target.closest(".attnx-cell");
      if (!cell) return;
      select(+cell.getAttribute("data-q"), +cell.getAttribute("data-k"));
      grid.focus({ preventScroll: true });
    });
    grid.addEventListener("focus", function () { if (state.q === null) select(0, 0); });
    grid.addEventListener("keydown", function (event) {
      var moves = { ArrowUp: [-1, 0], ArrowDown: [1, 0], ArrowLeft: [0, -1], ArrowRight: [0, 1] };
      var move = moves[event.key];
      if (!move) return;
      event.preventDefault();
      if (state.q === null) select(0, 0);
      else select(state.q + move[0], state.k + move[1]);
    });
    queryColumn.addEventListener("mouseover", function (event) {
      var node = event.target.closest(".attnx-tq");
      if (!node) return;
      state.hoverQ = +node.getAttribute("data-q");
      paintTokens();
      describeQuery(state.hoverQ);
    });
    queryColumn.addEventListener("mouseleave", function () {
      state.hoverQ = null;
      paintTokens();
      describeSelection();
    });
    queryColumn.addEventListener("click", function (event) {
      var node = event.target.closest(".attnx-tq");
      if (node) select(+node.getAttribute("data-q"), state.k === null ? 0 : state.k);
    });

    root.addEventListener("keydown", function (event) {
      var step = { "[": -1, "]": 1 }[event.key];
      if (!step || !data.frameLabels) return;
      event.preventDefault();
      selectFrame(state.frame + step);
    });

    paintSelection();
    selectFrame(0);
  }

  function start(root) {
    if (root.getAttribute("data-attnx-ready")) return;
    var source = root.querySelector("script.attnx-data");
    if (!source) return;
    root.setAttribute("data-attnx-ready", "true");
    var fallback = root.querySelector(".attnx-fallback");
    if (fallback) fallback.style.display = "none";
    build(root, JSON.parse(source.textContent));
  }

  var script = document.currentScript;
  var own = script && script.parentNode;
  if (own && own.classList && own.classList.contains("attnx")) start(own);
  Array.prototype.forEach.call(document.querySelectorAll(".attnx"), start);
})();
