// Oloproof report: the case table (filters, search, sorting) and case details drawn on demand.
// Every string from the run is set as text (textContent), never parsed as HTML.
(function () {
  "use strict";
  var node = document.getElementById("oloproof-data");
  if (!node) { document.body.dataset.ready = "true"; return; }
  var D = JSON.parse(node.textContent);
  var CRIT = D.criteria, CASES = D.cases, SLICES = D.slices || [], TEXTS = D.texts || [];
  var PAGE = 200;
  var state = { limit: PAGE, sortKey: null, sortDir: 1, rows: CASES };
  var hasLabels = CASES.some(function (c) { return c.l; });
  var byId = {};
  CASES.forEach(function (c, i) { byId[c.id] = i; });

  function $(id) { return document.getElementById(id); }
  function el(tag, cls, text) {
    var e = document.createElement(tag);
    if (cls) { e.className = cls; }
    if (text !== undefined && text !== null) { e.textContent = String(text); }
    return e;
  }
  function pretty(v) {
    if (v === null || v === undefined) { return "—"; }
    if (typeof v === "string") { return v; }
    return JSON.stringify(v, null, 2);
  }
  function caseHref(id) { return "#case=" + encodeURIComponent(id); }

  // ------------------------------------------------------------ cells
  function outcome(cell) {
    if (cell[0] === "m") { return "missing"; }
    if (cell[0] === "x") { return "excluded"; }
    if (cell[1] === null) { return "observed"; }
    return cell[1] >= 1 ? "pass" : "fail";
  }
  function cellText(cell, kind) {
    if (cell[0] !== "o") { return outcome(cell); }
    var v = cell[1];
    if (v === null) { return "observed"; }
    if (kind === "rate" || v === 1 || v === 0) { return v >= 1 ? "pass" : (v === 0 ? "fail" : v.toFixed(3)); }
    return v.toFixed(3);
  }

  function cellClass(cell, kind) {
    // a graded mean below 1 is a value, not a failure
    if (cell[0] === "o" && kind === "mean" && cell[1] !== null && cell[1] > 0 && cell[1] < 1) { return "cell-value"; }
    return "cell-" + outcome(cell);
  }

  // ------------------------------------------------------------ header and sorting
  var columns = [{ key: "id", label: "case" }];
  CRIT.forEach(function (c, i) { columns.push({ key: "c" + i, label: c.name, crit: i }); });
  columns.push({ key: "p", label: "best relevant position" });
  columns.push({ key: "t", label: "context truncated" });
  if (hasLabels) { columns.push({ key: "l", label: "diagnosis label" }); }

  function sortValue(c, key) {
    if (key === "id") { return String(c.id); }
    if (key === "p") { return typeof c.p === "number" ? c.p : Infinity; }
    if (key === "t") { return c.t === true ? 1 : (c.t === false ? 0 : 2); }
    if (key === "l") { return c.l || "~"; }
    var cell = c.c[columns.filter(function (x) { return x.key === key; })[0].crit];
    if (cell[0] === "o") { return cell[1] === null ? 0.5 : cell[1]; }
    return cell[0] === "m" ? 2 : 3;
  }
  function buildHead() {
    var tr = $("case-head");
    columns.forEach(function (col) {
      var th = el("th");
      th.scope = "col";
      th.dataset.key = col.key;
      var b = el("button", null, col.label);
      b.type = "button";
      b.title = "Sort by " + col.label;
      b.addEventListener("click", function () {
        if (state.sortKey === col.key) { state.sortDir = -state.sortDir; } else { state.sortKey = col.key; state.sortDir = 1; }
        Array.prototype.forEach.call(tr.children, function (h) { h.removeAttribute("aria-sort"); });
        th.setAttribute("aria-sort", state.sortDir > 0 ? "ascending" : "descending");
        apply();
      });
      th.appendChild(b);
      tr.appendChild(th);
    });
  }

  // ------------------------------------------------------------ filters
  var haystacks = null;
  function haystack(i) {
    if (!haystacks) {
      haystacks = CASES.map(function (c) {
        return [c.id, JSON.stringify(c.in), JSON.stringify(c.out), JSON.stringify(c.md), c.l || ""].join(" ").toLowerCase();
      });
    }
    return haystacks[i];
  }
  function fillSlices() {
    var sel = $("f-slice");
    if (!sel) { return; }
    SLICES.forEach(function (name, i) {
      var seen = {};
      CASES.forEach(function (c) { if (c.s[i] !== null && c.s[i] !== undefined) { seen[c.s[i]] = (seen[c.s[i]] || 0) + 1; } });
      Object.keys(seen).sort().forEach(function (v) {
        var o = el("option", null, name + "=" + v + " (" + seen[v] + ")");
        o.value = i + "\u0000" + v;
        sel.appendChild(o);
      });
    });
  }
  function matches() {
    var failed = $("f-failed").checked;
    var ci = $("f-criterion").value, want = $("f-outcome").value;
    var sl = $("f-slice") ? $("f-slice").value : "";
    var lab = $("f-label") ? $("f-label").value : "";
    var q = $("f-search").value.trim().toLowerCase();
    var si = -1, sv = null;
    if (sl) { var parts = sl.split("\u0000"); si = +parts[0]; sv = parts[1]; }
    var out = [];
    for (var i = 0; i < CASES.length; i++) {
      var c = CASES[i];
      if (failed && !c.f) { continue; }
      if (ci !== "" && outcome(c.c[+ci]) !== want) { continue; }
      if (si >= 0 && c.s[si] !== sv) { continue; }
      if (lab && c.l !== lab) { continue; }
      if (q && haystack(i).indexOf(q) < 0) { continue; }
      out.push(c);
    }
    if (state.sortKey) {
      var key = state.sortKey, dir = state.sortDir;
      out.sort(function (a, b) {
        var x = sortValue(a, key), y = sortValue(b, key);
        return (x < y ? -1 : (x > y ? 1 : 0)) * dir;
      });
    }
    return out;
  }

  // ------------------------------------------------------------ table
  function row(c) {
    var tr = el("tr", c.f ? "failed" : "passed");
    tr.dataset.case = c.id;
    var td = el("td");
    var a = el("a", null, c.id);
    a.href = caseHref(c.id);
    td.appendChild(a);
    tr.appendChild(td);
    c.c.forEach(function (cell, i) {
      var t = el("td", cellClass(cell, CRIT[i].kind), cellText(cell, CRIT[i].kind));
      if (cell[0] !== "o" && cell[1]) { t.title = String(cell[1]); }
      tr.appendChild(t);
    });
    tr.appendChild(el("td", "num", c.p === null || c.p === undefined ? "—" : c.p));
    tr.appendChild(el("td", null, c.t === true ? "yes" : (c.t === false ? "no" : "—")));
    if (hasLabels) { tr.appendChild(el("td", null, c.l || "")); }
    return tr;
  }
  function render() {
    var rows = state.rows, n = Math.min(rows.length, state.limit);
    var frag = document.createDocumentFragment();
    for (var i = 0; i < n; i++) { frag.appendChild(row(rows[i])); }
    var body = $("case-rows");
    body.textContent = "";
    body.appendChild(frag);
    var failed = rows.filter(function (c) { return c.f; }).length;
    $("shown").textContent = "Showing " + rows.length + " of " + CASES.length + " cases (" + failed + " failed)" +
      (n < rows.length ? "; the first " + n + " listed" : "");
    $("shown").dataset.shown = String(rows.length);
    $("more").hidden = n >= rows.length;
  }
  function apply() {
    state.rows = matches();
    state.limit = PAGE;
    render();
  }

  // ------------------------------------------------------------ case detail
  function section(parent, title, content) {
    parent.appendChild(el("h3", null, title));
    if (content !== undefined) { parent.appendChild(content); }
  }
  function pre(v) { return el("pre", null, pretty(v)); }
  function stateText(s) {
    if (s === "c") { return "in context"; }
    if (s === "b") { return "below top-k"; }
    if (s.indexOf("d:") === 0) {
      var why = s.slice(2);
      return why === "token_budget" ? "dropped by token budget" : "dropped (" + why + ")";
    }
    return "not in context";
  }
  function ladder(c) {
    var t = el("table", "grid ladder");
    t.id = "ladder";
    var head = el("tr");
    ["position", "doc id", "chunk id", "score", "tokens", "relevance", "context", "passage"].forEach(function (h) {
      var th = el("th", null, h); th.scope = "col"; head.appendChild(th);
    });
    var thead = el("thead"); thead.appendChild(head); t.appendChild(thead);
    var body = el("tbody");
    var k = D.top_k;
    c.r.forEach(function (r, i) {
      var grade = r[5];
      var rel = grade === null || grade === undefined ? "" : (grade > 0 ? "relevant (grade " + grade + ")" : "judged not relevant");
      var st = r[6].split(":")[0];
      var tr = el("tr", "state-" + st + (grade > 0 ? " relevant" : ""));
      tr.dataset.position = String(r[0]);
      [r[0], r[1], r[2] === null ? "—" : r[2], r[3] === null ? "—" : r[3], r[4] === null ? "—" : r[4], rel].forEach(function (v, j) {
        tr.appendChild(el("td", j === 5 ? "relevance" : null, v));
      });
      tr.appendChild(el("td", "state", stateText(r[6])));
      tr.appendChild(el("td", "text", r[7] === null ? "" : TEXTS[r[7]]));
      body.appendChild(tr);
      var next = c.r[i + 1];
      if (k && r[0] === k && next) {
        var cut = el("tr", "cut");
        var td = el("td", null, "top-k cut (top_k " + k + "): candidates below this line are not offered to the context");
        td.colSpan = 8;
        cut.appendChild(td);
        body.appendChild(cut);
      }
    });
    t.appendChild(body);
    return t;
  }
  function criteriaTable(c) {
    var t = el("table", "grid criteria");
    var head = el("tr");
    ["criterion", "outcome", "expected", "actual", "reason / rationale"].forEach(function (h) {
      var th = el("th", null, h); th.scope = "col"; head.appendChild(th);
    });
    var thead = el("thead"); thead.appendChild(head); t.appendChild(thead);
    var body = el("tbody");
    CRIT.forEach(function (k, i) {
      var d = c.cd[k.name] || {};
      var expected = d.xs !== undefined ? TEXTS[d.xs] : d.x;
      var actual = d.as !== undefined ? TEXTS[d.as] : d.a;
      if (actual === undefined && c.c[i][0] === "o") { actual = c.c[i][1]; }
      var tr = el("tr");
      tr.dataset.criterion = k.name;
      tr.appendChild(el("td", null, k.name));
      tr.appendChild(el("td", cellClass(c.c[i], k.kind), cellText(c.c[i], k.kind)));
      tr.appendChild(el("td", null, expected === undefined ? "" : pretty(expected)));
      tr.appendChild(el("td", null, actual === undefined ? "" : pretty(actual)));
      var why = el("td");
      if (d.reason || (c.c[i][0] !== "o" && c.c[i][1])) { why.appendChild(el("div", null, d.reason || c.c[i][1])); }
      if (d.rationale) { why.appendChild(el("div", "rationale", "Judge rationale: " + d.rationale)); }
      if (d.message) { why.appendChild(el("div", null, d.message)); }
      if (d.traceback) { why.appendChild(pre(d.traceback)); }
      tr.appendChild(why);
      body.appendChild(tr);
    });
    t.appendChild(body);
    return t;
  }
  function repeatsTable(c) {
    // every repeat of the case (repeats: N): its verdicts, its output and its error
    var t = el("table", "grid repeats");
    var head = el("tr");
    ["repeat"].concat(CRIT.map(function (k) { return k.name; })).concat(["output", "error"]).forEach(function (h) {
      var th = el("th", null, h); th.scope = "col"; head.appendChild(th);
    });
    var thead = el("thead"); thead.appendChild(head); t.appendChild(thead);
    var body = el("tbody");
    c.rp.forEach(function (r) {
      var tr = el("tr");
      tr.dataset.repeat = r[0];
      tr.appendChild(el("td", null, String(r[0])));
      CRIT.forEach(function (k, i) { tr.appendChild(el("td", cellClass(r[1][i], "rate"), cellText(r[1][i], "rate"))); });
      var out = el("td"); out.appendChild(pre(r[2])); tr.appendChild(out);
      tr.appendChild(el("td", r[3] ? "cell-fail" : null, r[3] || ""));
      body.appendChild(tr);
    });
    t.appendChild(body);
    return t;
  }
  function showDetail(id) {
    var box = $("detail"), body = $("detail-body");
    body.textContent = "";
    var i = byId[id];
    $("detail-h").textContent = "Case " + id;
    box.hidden = false;
    if (i === undefined) {
      body.appendChild(el("p", null, "No case " + id + " in this run."));
      return;
    }
    var c = CASES[i];
    var p = el("p");
    var b = el("span", "badge " + (c.f ? "fail" : "pass"), c.f ? "failed" : "passed");
    p.appendChild(b);
    if (c.l) { p.appendChild(document.createTextNode(" ")); p.appendChild(el("span", "badge warn", c.l)); }
    if (c.src) { p.appendChild(document.createTextNode(" " + c.src)); }
    body.appendChild(p);
    if (c.dg) {
      body.appendChild(el("p", null, "Diagnosis: " + c.dg.label + ", " + c.dg.reason + ", strength " + c.dg.strength));
    }
    var cols = el("div", "cols");
    var left = el("div"), right = el("div");
    section(left, "Input", pre(c.in));
    section(right, "Expected", pre(c.ex));
    cols.appendChild(left); cols.appendChild(right);
    body.appendChild(cols);
    if (c.q !== null && c.q !== undefined) { section(body, "Retrieval query", pre(c.q)); }
    if (c.r) {
      section(body, "Retrieval ladder", ladder(c));
    } else {
      section(body, "Retrieval ladder", el("p", null, c.e ? "No retrieval recorded (the system failed)." : "This system has no retrieval stage."));
    }
    section(body, "Output", pre(c.out));
    if (c.rp) { section(body, "Repeats (" + c.rp.length + ")", repeatsTable(c)); }
    section(body, "Criteria", criteriaTable(c));
    if (c.e) {
      var err = el("div", "error");
      err.appendChild(el("p", "cell-fail", (c.e.stage || "") + ": " + (c.e.type || "") + " — " + (c.e.message || "")));
      if (c.e.reason) { err.appendChild(el("p", null, "reason: " + c.e.reason)); }
      if (c.e.traceback) { err.appendChild(pre(c.e.traceback)); }
      section(body, "Error", err);
    }
    var meta = el("div", "cols");
    var m1 = el("div"), m2 = el("div"), m3 = el("div");
    section(m1, "Timings (s)", pre(c.tm));
    if (c.u) { m1.appendChild(el("p", "usage", "Spent: " + c.u)); }
    section(m2, "Cache", pre(c.ca ? {
      execution: c.ca[0], retrieve: c.ca[1], generate: c.ca[2], judgment: { hit: c.ca[3], miss: c.ca[4] }
    } : null));
    section(m3, "Metadata", pre(c.md));
    meta.appendChild(m1); meta.appendChild(m2); meta.appendChild(m3);
    body.appendChild(meta);
  }
  function fromHash() {
    var m = /^#case=(.*)$/.exec(location.hash);
    if (!m) { $("detail").hidden = true; return; }
    var id;
    try { id = decodeURIComponent(m[1]); } catch (e) { id = m[1]; }
    showDetail(id);
    $("detail").focus();
  }

  // ------------------------------------------------------------ wiring
  buildHead();
  fillSlices();
  var form = $("filters");
  form.addEventListener("submit", function (e) { e.preventDefault(); });
  form.addEventListener("change", apply);
  $("f-search").addEventListener("input", apply);
  form.addEventListener("reset", function () { setTimeout(apply, 0); });
  $("more").addEventListener("click", function () { state.limit += PAGE * 5; render(); });
  window.addEventListener("hashchange", fromHash);
  document.addEventListener("keydown", function (e) {
    if (e.key === "Escape" && !$("detail").hidden) {
      var id = (/^#case=(.*)$/.exec(location.hash) || [])[1];
      location.hash = "cases";
      var link = id && document.querySelector('#case-rows a[href="#case=' + id.replace(/["\\]/g, "\\$&") + '"]');
      if (link) { link.focus(); }
    }
  });
  apply();
  fromHash();
  document.body.dataset.ready = "true";
})();
