"""The HTML report's inline stylesheet and scripts (engine/report/html.py puts them in the
page): CSS (screen and print), PROBE_JS (first in <head>: records window errors, failed loads
and console.error on <html>) and PAGE_JS (draws the charts, the tables' SLO verdicts, keeps
the saturation chart's labels apart, records what it drew on <html> and marks the page ready).
The page draws `scatter` and `bar` traces only: the vendored plotly.js basic bundle
(assets/README.md) holds them; a new trace type needs a bundle that has it.
"""

CSS = """
:root { --fg:#1d232a; --muted:#5b6672; --line:#d9dee4; --bg:#f6f7f9; --card:#fff; --pass:#e6f4ea; --fail:#fde7e7; --unknown:#fff4d6; }
* { box-sizing: border-box; }
body { margin: 0 auto; max-width: 1280px; padding: 12px 20px 40px; font: 14px/1.45 system-ui, -apple-system, "Segoe UI", Roboto, sans-serif; color: var(--fg); background: var(--bg); }
h1 { font-size: 22px; margin: 8px 0 2px; } h2 { font-size: 17px; margin: 0 0 6px; } h3 { font-size: 15px; margin: 14px 0 6px; }
.sub, .note, footer { color: var(--muted); font-size: 13px; margin: 4px 0 8px; }
.card { background: var(--card); border: 1px solid var(--line); border-radius: 8px; padding: 12px 16px; margin: 14px 0; }
.chart { width: 100%; height: 420px; } .chart.tall { height: 620px; }
.swatch { display: inline-block; width: 11px; height: 11px; border-radius: 2px; margin-right: 5px; vertical-align: -1px; }
.key { margin-right: 12px; white-space: nowrap; color: var(--fg); } .key .workload { color: var(--muted); }
.warning { background: var(--unknown); color: #7a5a00; border: 1px solid #e8c66a; border-radius: 6px; padding: 6px 10px; margin: 6px 0; font-weight: 600; }
.scroll { overflow-x: auto; }
table { border-collapse: collapse; font-variant-numeric: tabular-nums; font-size: 13px; }
th, td { border-bottom: 1px solid var(--line); padding: 3px 6px; text-align: right; white-space: nowrap; }
table.steps { font-size: 12.5px; }
table.settings th, table.settings td { text-align: left; white-space: normal; vertical-align: top; }
table.settings td { max-width: 520px; overflow-wrap: anywhere; }
thead th { background: #eef1f4; position: sticky; top: 0; }
tr.pass td.verdict { background: var(--pass); color: #1e6b34; } tr.fail td.verdict { background: var(--fail); color: #a61b1b; }
tr.unknown td.verdict { background: var(--unknown); color: #7a5a00; }
td.verdict { text-align: left; white-space: normal; min-width: 90px; max-width: 260px; }
#slo-form { display: flex; flex-wrap: wrap; gap: 6px 18px; }
#slo-form input { width: 80px; padding: 2px 4px; font: inherit; }
#slo-verdicts { margin: 6px 0 0; padding-left: 18px; }
@media (max-width: 900px) { body { padding: 8px; } .chart { height: 360px; } .chart.tall { height: 560px; } }
@media print {
  @page { size: A4 landscape; margin: 10mm; }
  body { background: #fff; max-width: none; padding: 0; font-size: 11px; }
  .card { border: none; padding: 0; margin: 8px 0; break-inside: avoid; page-break-inside: avoid; }
  .chart { height: 330px; } .chart.tall { height: 480px; }
  .modebar, #slo-form input::placeholder { display: none !important; }
  thead th { position: static; }
  .scroll { overflow: visible; }
  footer { display: none; }
}
"""

# First in <head>: records errors (window errors, failed loads, console.error) on <html>.
PROBE_JS = """
(function(){
  var root = document.documentElement, errors = [];
  function note(msg){ errors.push(String(msg).slice(0, 500)); root.setAttribute('data-errors', JSON.stringify(errors)); }
  window.__redlineNote = note;
  window.addEventListener('error', function(e){
    if (e.target && e.target !== window && (e.target.src || e.target.href)) note('failed to load ' + (e.target.src || e.target.href));
    else note('error: ' + (e.message || e.type) + (e.filename ? ' at ' + e.filename + ':' + e.lineno : ''));
  }, true);
  window.addEventListener('unhandledrejection', function(e){ note('unhandled rejection: ' + (e.reason && e.reason.message || e.reason)); });
  var ce = console.error;
  console.error = function(){ note('console.error: ' + Array.prototype.join.call(arguments, ' ')); return ce.apply(console, arguments); };
})();
"""

PAGE_JS = r"""
(function(){
  var root = document.documentElement;
  var D = JSON.parse(document.getElementById('redline-data').textContent);
  var S = D.sessions, KIND = D.kind, BOUND = '\u2265';
  var BOUND_RISE = 2;  // a lower bound's dashed segment rises to twice the bound (a log axis: 0.3 decade)
  var drawn = [], expected = document.querySelectorAll('[data-chart]').length;
  root.setAttribute('data-charts-expected', String(expected));
  var CONFIG = {displaylogo: false, responsive: true, modeBarButtonsToRemove: ['lasso2d', 'select2d']};
  var FONT = {family: 'system-ui, -apple-system, Segoe UI, Roboto, sans-serif', size: 12};
  function loadLabel(x){ return KIND === 'R' ? 'R=' + x + '/s' : KIND === 'x' ? 'x' + x : 'C=' + x; }
  function ms(v, b){ if (v === null || v === undefined) return '-'; var s = v >= 10000 ? (v/1000).toFixed(2) + ' s' : (v >= 100 ? v.toFixed(0) : v.toFixed(1)) + ' ms'; return (b ? BOUND : '') + s; }
  function logTicks(vals){  // 1-2-5 ticks over the values' range (finer when that gives too few)
    if (!vals.length) return [];
    var lo = Math.min.apply(null, vals) / 1.15, hi = Math.max.apply(null, vals) * 1.15;
    function ticks(mult){ var out = []; for (var e = Math.floor(Math.log10(lo)); e <= Math.ceil(Math.log10(hi)); e++) mult.forEach(function(m){ var v = m * Math.pow(10, e); if (v >= lo && v <= hi) out.push(+v.toPrecision(3)); }); return out; }
    var t = ticks([1, 2, 5]);
    return t.length >= 3 ? t : ticks([1, 1.5, 2, 3, 4, 5, 6, 7, 8, 9]);
  }
  function num(v, nd){ return v === null || v === undefined ? '-' : v.toFixed(nd); }
  function xaxis(extra){
    var xs = []; S.forEach(function(s){ s.steps.forEach(function(p){ if (xs.indexOf(p.x) < 0) xs.push(p.x); }); });
    xs.sort(function(a, b){ return a - b; });
    var logx = xs.length > 2 && xs[0] > 0 && xs[xs.length - 1] / xs[0] >= 8;
    var ax = {title: {text: D.axis}, type: logx ? 'log' : 'linear', zeroline: false, automargin: true};
    if (logx && xs.length <= 16) { ax.tickvals = xs; ax.ticktext = xs.map(String); }
    return Object.assign(ax, extra || {});
  }
  function done(id){ return function(gd){
    if (gd && gd.querySelector && gd.querySelector('.main-svg')) { drawn.push(id); root.setAttribute('data-charts-drawn', String(drawn.length)); root.setAttribute('data-charts', drawn.join(' ')); }
  }; }
  function plot(id, traces, layout){
    var el = document.getElementById(id);
    if (!el) return Promise.resolve();
    layout = Object.assign({font: FONT, margin: {l: 60, r: 20, t: 30, b: 50}, hovermode: 'closest', legend: {orientation: 'h', y: -0.18}}, layout);
    try { return Plotly.newPlot(el, traces, layout, CONFIG).then(done(id)).catch(function(e){ window.__redlineNote('plot ' + id + ': ' + e); }); }
    catch (e) { window.__redlineNote('plot ' + id + ': ' + e); return Promise.resolve(); }
  }

  // what was drawn, on <html> for tests and the curious (JSON)
  function record(name, value){ root.setAttribute(name, JSON.stringify(value)); }
  function boxOf(gd, i){
    var g = gd.querySelector('g.annotation[data-index="' + i + '"]');
    var t = g && (g.querySelector('.annotation-text-g') || g);
    if (!t) return null;
    var r = t.getBoundingClientRect();
    return {l: r.left, r: r.right, t: r.top, b: r.bottom};
  }
  // labels that still overlap once drawn (neighbouring loads): each moved up above the one it hits
  function unclutter(id){
    var gd = document.getElementById(id), anns = gd && gd.layout && gd.layout.annotations || [];
    var placed = [], update = {};
    anns.forEach(function(a, i){
      var b = boxOf(gd, i);
      if (!b) return;
      var dy = 0;
      for (var guard = 0; guard < 50; guard++) {
        var hit = placed.filter(function(p){ return b.l < p.r && p.l < b.r && b.t + dy < p.b && p.t < b.b + dy; })[0];
        if (!hit) break;
        dy = hit.t - b.b - 3;
      }
      if (dy) update['annotations[' + i + '].ay'] = a.ay + dy;
      placed.push({l: b.l, r: b.r, t: b.t + dy, b: b.b + dy});
    });
    return Object.keys(update).length ? Plotly.relayout(gd, update) : Promise.resolve();
  }
  function labelBoxes(id, labels){  // each label's box, and the pixel x of the point it names
    var gd = document.getElementById(id), fl = gd && gd._fullLayout;
    return labels.map(function(a, i){
      var at = fl && fl.xaxis ? gd.getBoundingClientRect().left + fl._size.l + fl.xaxis.d2p(a.x) : null;
      return Object.assign({text: a.text, session: a.session, x: a.x, at_px: at}, gd ? boxOf(gd, i) : {});
    });
  }

  // -- the SLO selector: pass / fail / unknown per step
  var form = document.getElementById('slo-form');
  Object.keys(D.slo || {}).forEach(function(k){ if (form.elements[k]) form.elements[k].value = D.slo[k]; });
  function bounds(){
    var b = {};
    ['ttft_p99', 'itl_p99', 'tpot', 'e2e_p99', 'errors', 'attainment'].forEach(function(k){
      var v = parseFloat(form.elements[k].value); if (isFinite(v)) b[k] = v; });
    return b;
  }
  function judge(p, b){
    var fails = [], unknown = [];
    function lat(key, name){
      if (b[key] === undefined) return;
      var v = p[key]; if (v === null || v === undefined) { unknown.push(name + ' not measured'); return; }
      if (v > b[key]) fails.push(name + ' ' + ms(v, p[key + '_bound']) + ' > ' + ms(b[key]));
      else if (p[key + '_bound']) unknown.push(name + ' ' + ms(v, true) + ' (a lower bound)');
    }
    lat('ttft_p99', 'TTFT p99'); lat('itl_p99', 'ITL p99'); lat('tpot', 'TPOT'); lat('e2e_p99', 'E2E p99');
    if (b.errors !== undefined && p.error_rate !== null && p.error_rate * 100 > b.errors) fails.push('errors ' + (p.error_rate * 100).toFixed(1) + ' % > ' + b.errors + ' %');
    if (b.attainment !== undefined) {
      if (p.attainment === null || p.attainment === undefined) unknown.push('no SLO attainment recorded');
      else if (p.attainment * 100 < b.attainment) fails.push('SLO met ' + (p.attainment * 100).toFixed(0) + ' % < ' + b.attainment + ' %');
    }
    return {state: fails.length ? 'fail' : unknown.length ? 'unknown' : 'pass', why: fails.concat(unknown).join('; ')};
  }
  var satIndex = [];  // session -> the index of its tok/s trace in the saturation chart
  function sameBounds(a, b){  // the selector holds exactly a session's recorded SLO
    var ka = Object.keys(a), kb = Object.keys(b || {});
    return ka.length === kb.length && ka.every(function(k){ return +b[k] === a[k]; });
  }
  function engineVerdict(p){ return {state: p.slo_state, why: p.slo_why || ''}; }
  function largest(steps, verdicts){  // engine/rules/verdicts.py max_slo_load: the largest passing below the first that did not
    var best = null;
    for (var j = 0; j < steps.length && verdicts[j].state === 'pass'; j++) best = steps[j].x;
    return best;
  }
  function applySlo(){
    var b = bounds(), any = Object.keys(b).length > 0;
    var items = [];
    S.forEach(function(s, i){
      // while the selector holds the session's recorded SLO, the engine's own verdict on each
      // step (the one judge of attainment, goodput, the gate and the search); other bounds: the page's
      var recorded = s.slo_form && sameBounds(b, s.slo_form) && s.steps.every(function(p){ return p.slo_state; });
      var judgeOf = recorded ? engineVerdict : function(p){ return judge(p, b); };
      var verdicts = s.steps.map(judgeOf);
      var best = recorded ? (s.max_slo ? s.max_slo.x : null) : largest(s.steps, verdicts);
      items.push('<li><span class="swatch" style="background:' + s.color + '"></span>' + esc(s.label) + ': ' +
        (!any ? 'no bound set' : best === null ? 'no step passes' : 'largest load passing: ' + loadLabel(best)) +
        (recorded ? ' (the recorded SLO, as redline judged it)' : '') + '</li>');
      var gd = document.getElementById('chart-saturation');
      if (gd && gd.data && satIndex[i] !== undefined) {
        Plotly.restyle(gd, {
          'marker.symbol': [verdicts.map(function(v){ return v.state === 'fail' ? 'x' : v.state === 'unknown' ? 'circle-open' : 'circle'; })],
          'marker.size': [verdicts.map(function(v){ return v.state === 'fail' ? 11 : 9; })]
        }, [satIndex[i]]);
      }
      var rows = document.querySelectorAll('table.steps[data-session="' + i + '"] tr.step');
      rows.forEach(function(tr){
        var p = JSON.parse(tr.getAttribute('data-step')), v = judgeOf(p), cell = tr.querySelector('td.verdict');
        tr.classList.remove('pass', 'fail', 'unknown');
        if (!any) { cell.textContent = '-'; return; }
        tr.classList.add(v.state);
        cell.textContent = (v.state === 'pass' ? '\u2713 passes' : v.state === 'fail' ? '\u2717 ' : '? ') + (v.state === 'pass' ? '' : v.why);
      });
    });
    document.getElementById('slo-verdicts').innerHTML = items.join('');
  }
  function esc(t){ var d = document.createElement('div'); d.textContent = t; return d.innerHTML; }

  // -- charts
  var jobs = [];
  (function saturation(){
    var traces = [], labels = [], top = 0;
    S.forEach(function(s, i){
      var xs = s.steps.map(function(p){ return p.x; });
      satIndex[i] = traces.length;
      traces.push({x: xs, y: s.steps.map(function(p){ return p.tok_s; }), name: s.label + ' tok/s', legendgroup: 's' + i,
        mode: 'lines+markers', line: {color: s.color, width: 2}, marker: {color: s.color, size: 9, symbol: 'circle', line: {color: s.color, width: 2}},
        customdata: s.steps.map(function(p){ return [p.load, p.running === null ? '-' : p.running, p.failed]; }),
        hovertemplate: '%{customdata[0]}<br>%{y:.1f} output tok/s<br>server running %{customdata[1]}, failed %{customdata[2]}<extra>' + esc(s.label) + '</extra>'});
      if (s.steps.some(function(p){ return p.goodput !== null; })) {
        traces.push({x: xs, y: s.steps.map(function(p){ return p.goodput; }), name: s.label + ' goodput', legendgroup: 's' + i,
          mode: 'lines', line: {color: s.color, width: 1.5, dash: 'dash'},
          hovertemplate: '%{x}<br>goodput %{y:.1f} tok/s<extra>' + esc(s.label) + '</extra>'});
      }
      function mark(m, symbol, text, glyph){
        if (!m || m.x === null || m.x === undefined) return;
        var p = s.steps.filter(function(q){ return q.x === m.x; })[0];
        var y = p ? p.tok_s : 0;
        traces.push({x: [m.x], y: [y], name: s.label + ' ' + text, legendgroup: 's' + i, mode: 'markers', showlegend: false,
          marker: {symbol: symbol, size: 17, color: symbol === 'x-thin-open' ? '#c00' : s.color, line: {color: '#222', width: 1.5}},
          hovertemplate: text + ' ' + loadLabel(m.x) + '<br>%{y:.1f} tok/s<br>' + esc(m.how || m.detail || '') + '<extra>' + esc(s.label) + '</extra>'});
        // the label: an annotation above its point, staggered when another label shares its load
        // (two sessions' knees at one C); unclutter() moves any that still overlap once drawn
        var k = labels.filter(function(a){ return a.x === m.x; }).length;
        labels.push({x: m.x, y: y, text: glyph + ' ' + text + ' ' + loadLabel(m.x), showarrow: true, arrowhead: 0, arrowwidth: 1,
          arrowcolor: s.color, ax: 0, ay: -(26 + 22 * k), font: {size: 11, color: s.color}, bgcolor: 'rgba(255,255,255,0.85)',
          bordercolor: s.color, borderwidth: 1, borderpad: 2, session: i});
        top = Math.max(top, y);
      }
      // one knee per workload when the session ran more than one (engine/rules/knee.py), each named by it
      if (s.knees && s.knees.length) s.knees.forEach(function(k){ mark(k, 'diamond', 'knee (' + k.workload + ')', '\u25c6'); });
      else mark(s.knee, 'diamond', 'knee', '\u25c6');
      mark(s.max_slo, 'star', 'max SLO', '\u2605');
      if (s.break) mark({x: s.break.x, how: s.break.reason + ': ' + s.break.detail}, 'x-thin-open', 'break', '\u2715');
    });
    S.forEach(function(s){ s.steps.forEach(function(p){ top = Math.max(top, p.tok_s || 0, p.goodput || 0); }); });
    var xa = xaxis();
    // an annotation's x on a log axis is the log10 of the value (plotly's rule)
    var annotations = labels.map(function(a){ var c = Object.assign({}, a, {x: xa.type === 'log' ? Math.log10(a.x) : a.x}); delete c.session; return c; });
    // headroom above the highest point for the labels
    var yaxis = {title: {text: 'output tok/s'}, automargin: true, range: [0, (top || 1) * (labels.length ? 1.4 : 1.08)]};
    jobs.push(plot('chart-saturation', traces, {xaxis: xa, yaxis: yaxis, annotations: annotations})
      .then(function(){ return unclutter('chart-saturation'); })
      .then(function(){ record('data-labels', labelBoxes('chart-saturation', labels)); }));
  })();

  (function latency(){
    var panels = [['ttft', 'TTFT'], ['itl', 'ITL'], ['tpot', 'TPOT'], ['e2e', 'E2E']];
    var traces = [], layout = {grid: {rows: 2, columns: 2, pattern: 'independent', xgap: 0.12, ygap: 0.22}, annotations: [], margin: {l: 60, r: 20, t: 40, b: 50}};
    panels.forEach(function(pn, k){
      var ax = k === 0 ? '' : String(k + 1);
      layout['xaxis' + ax] = xaxis({title: {text: k >= 2 ? D.axis : ''}});
      var vals = [];
      S.forEach(function(s){ s.steps.forEach(function(p){ [pn[0], pn[0] + '_p50', pn[0] + '_p99'].forEach(function(k){
        if (p[k] > 0) vals.push(p[k] * (p[k + '_bound'] ? BOUND_RISE : 1)); }); }); });
      var tv = logTicks(vals);
      layout['yaxis' + ax] = {title: {text: pn[1]}, type: 'log', automargin: true, tickvals: tv, ticktext: tv.map(function(v){ return v >= 1000 ? +(v / 1000).toPrecision(3) + ' s' : v + ' ms'; })};
      layout.annotations.push({text: '<b>' + pn[1] + '</b>', xref: (ax ? 'x' + ax : 'x') + ' domain', yref: (ax ? 'y' + ax : 'y') + ' domain', x: 0, y: 1.12, showarrow: false, xanchor: 'left'});
      var series = pn[0] === 'tpot' ? [['tpot', 'mean', 'solid']] : [[pn[0] + '_p99', 'p99', 'solid'], [pn[0] + '_p50', 'p50', 'dot']];
      S.forEach(function(s, i){
        series.forEach(function(se){
          var key = se[0], pts = s.steps.filter(function(p){ return p[key] !== null && p[key] !== undefined; });
          if (!pts.length) return;
          var width = se[2] === 'dot' ? 1.5 : 2, where = {xaxis: 'x' + ax, yaxis: 'y' + ax, legendgroup: 's' + i};
          var bounds = pts.filter(function(p){ return p[key + '_bound']; });
          // measured points: one line through them alone, broken (a gap) at a bound
          if (bounds.length < pts.length) traces.push(Object.assign({x: pts.map(function(p){ return p.x; }),
            y: pts.map(function(p){ return p[key + '_bound'] ? null : p[key]; }), connectgaps: false,
            name: s.label, showlegend: k === 0 && se[1] !== 'p50', meta: {session: i, series: key, part: 'measured'},
            mode: 'lines+markers', line: {color: s.color, width: width, dash: se[2]},
            marker: {color: s.color, size: 8, symbol: 'circle', line: {color: s.color, width: 2}},
            customdata: pts.map(function(p){ return [p.load, ms(p[key])]; }),
            hovertemplate: '%{customdata[0]}<br>' + pn[1] + ' ' + se[1] + ' %{customdata[1]}<extra>' + esc(s.label) + '</extra>'}, where));
          if (!bounds.length) return;
          // a lower bound: an open marker, and a dashed segment rising from it (the value is at
          // least this, maybe more), joined to nothing
          var seg = {x: [], y: []};
          bounds.forEach(function(p){ seg.x.push(p.x, p.x, null); seg.y.push(p[key], p[key] * BOUND_RISE, null); });
          traces.push(Object.assign({x: seg.x, y: seg.y, mode: 'lines', connectgaps: false, hoverinfo: 'skip', showlegend: false,
            name: s.label + ' ' + se[1] + ' lower bound', meta: {session: i, series: key, part: 'bound-segment'},
            line: {color: s.color, width: 2, dash: 'dash'}}, where));
          traces.push(Object.assign({x: bounds.map(function(p){ return p.x; }), y: bounds.map(function(p){ return p[key]; }),
            mode: 'markers', showlegend: false, name: s.label + ' ' + se[1] + ' lower bound', meta: {session: i, series: key, part: 'bound'},
            marker: {color: s.color, size: 9, symbol: 'circle-open', line: {color: s.color, width: 2}},
            customdata: bounds.map(function(p){ return [p.load, ms(p[key], true)]; }),
            hovertemplate: '%{customdata[0]}<br>' + pn[1] + ' ' + se[1] + ' %{customdata[1]} (lower bound: requests still waiting at the close)<extra>' + esc(s.label) + '</extra>'}, where));
        });
      });
    });
    jobs.push(plot('chart-latency', traces, layout).then(function(){
      var gd = document.getElementById('chart-latency');
      record('data-latency-traces', (gd && gd.data || []).filter(function(t){ return t.meta; }).map(function(t){
        return {meta: t.meta, mode: t.mode, dash: t.line && t.line.dash || 'solid', symbol: t.marker ? t.marker.symbol : null, x: t.x, y: t.y};
      }));
    }));
  })();

  (function pareto(){
    var perGpu = S.every(function(s){ return s.gpus; });
    var front = [];
    var traces = S.map(function(s, i){
      var idx = s.steps.map(function(p, j){ return j; }).filter(function(j){ return s.steps[j].per_user !== null; });
      var pts = idx.map(function(j){ return s.steps[j]; });
      var on = idx.map(function(j){ return !!(s.front && s.front[j]); });
      var g = perGpu ? s.gpus : 1;
      pts.forEach(function(p, k){ if (on[k]) front.push({x: p.tok_s / g, y: p.per_user}); });
      return {x: pts.map(function(p){ return p.tok_s / g; }), y: pts.map(function(p){ return p.per_user; }), name: s.label,
        mode: 'lines+markers+text', text: pts.map(function(p){ return p.load; }), textposition: 'top right', textfont: {size: 10, color: s.color},
        line: {color: s.color, width: 2}, marker: {color: s.color, size: 9, opacity: on.map(function(f){ return f ? 1 : 0.3; })},
        customdata: pts.map(function(p, k){ return [p.load, p.tok_s, p.tok_s / g, on[k] ? 'on the Pareto front' : 'beaten on both axes']; }),
        hovertemplate: '%{customdata[0]}<br>%{y:.2f} tok/s per user<br>%{customdata[1]:.1f} tok/s total' + (perGpu ? ', %{customdata[2]:.1f} per GPU' : '') + '<br>%{customdata[3]}<extra>' + esc(s.label) + '</extra>'};
    });
    front.sort(function(a, b){ return a.x - b.x; });
    if (front.length) traces.push({x: front.map(function(p){ return p.x; }), y: front.map(function(p){ return p.y; }), name: 'Pareto front',
      mode: 'lines', line: {color: '#000', width: 1.5, dash: 'dot'}, hoverinfo: 'skip', meta: 'pareto-front'});
    jobs.push(plot('chart-pareto', traces, {xaxis: {title: {text: perGpu ? 'output tok/s per GPU' : 'output tok/s'}, rangemode: 'tozero', automargin: true},
      yaxis: {title: {text: 'output tok/s per user (1000 / TPOT)'}, rangemode: 'tozero', automargin: true}}));
  })();

  (function attainment(){
    if (!document.getElementById('chart-attainment')) return;
    var traces = S.map(function(s, i){
      var pts = s.steps.filter(function(p){ return p.attainment !== null; });
      return {type: 'bar', x: pts.map(function(p){ return p.load; }), y: pts.map(function(p){ return p.attainment * 100; }), name: s.label,
        marker: {color: s.color}, text: pts.map(function(p){ return (p.attainment * 100).toFixed(0) + ' %'; }), textposition: 'outside', cliponaxis: false,
        hovertemplate: '%{x}<br>SLO met by %{y:.1f} % of requests<extra>' + esc(s.label) + '</extra>'};
    });
    var need = null;
    S.forEach(function(s){ if (need === null && s.slo && s.slo.attainment) need = s.slo.attainment * 100; });
    var layout = {barmode: 'group', xaxis: {title: {text: D.axis}, type: 'category'}, yaxis: {title: {text: 'requests meeting the SLO (%)'}, range: [0, 112]}};
    if (need !== null) layout.shapes = [{type: 'line', xref: 'paper', x0: 0, x1: 1, y0: need, y1: need, line: {color: '#444', dash: 'dash', width: 1}}];
    jobs.push(plot('chart-attainment', traces, layout));
  })();

  var EV_COLOURS = {preset: '#888', probe: '#9467bd', key: '#17becf', warning: '#ff7f0e', 'break': '#d62728', error: '#d62728', workload: '#2ca02c'};
  S.forEach(function(s, i){
    var el = document.getElementById('chart-timeline-' + i);
    if (!el) return;
    var T = s.timeline, c = T.cols, rows = [];
    rows.push({title: T.rate ? 'load (C, req/s)' : 'concurrency', traces: [
      {x: c.t, y: c.c, name: 'target C', line: {color: s.color, shape: 'hv'}, hovertemplate: '%{x:.0f} s: C=%{y}<extra></extra>'}]
      .concat(T.rate ? [{x: c.t, y: c.rate, name: 'rate', line: {color: '#555', shape: 'hv', dash: 'dot'}, hovertemplate: '%{x:.0f} s: %{y} req/s<extra></extra>'}] : [])});
    rows.push({title: 'output tok/s', traces: [{x: c.t, y: c.tok_s, name: 'output tok/s', line: {color: s.color}, hovertemplate: '%{x:.0f} s: %{y:.1f} tok/s<extra></extra>'}]});
    rows.push({title: 'TTFT p99 (ms)', traces: [{x: c.t, y: c.ttft_p99, name: 'TTFT p99', line: {color: '#444'}, hovertemplate: '%{x:.0f} s: TTFT p99 %{y:.1f} ms<extra></extra>'}]});
    if (T.server) rows.push({title: 'server requests', traces: [
      {x: c.t, y: c.running, name: 'running', line: {color: '#2ca02c'}, hovertemplate: '%{x:.0f} s: %{y} running<extra></extra>'},
      {x: c.t, y: c.queued, name: 'queued', line: {color: '#d62728'}, hovertemplate: '%{x:.0f} s: %{y} queued<extra></extra>'}]});
    if (T.power) rows.push({title: 'GPU power (W)', traces: [{x: c.t, y: c.power, name: 'GPU power (sum)', line: {color: '#8c564b'}, hovertemplate: '%{x:.0f} s: %{y:.0f} W<extra></extra>'}]});
    var n = rows.length, traces = [], layout = {grid: {rows: n, columns: 1, pattern: 'coupled', ygap: 0.12}, showlegend: true,
      title: {text: esc(s.label) + ' over time', x: 0, font: {size: 13}}, margin: {l: 60, r: 20, t: 40, b: 50}, shapes: [], hovermode: 'x unified'};
    rows.forEach(function(r, k){
      var ax = k === 0 ? '' : String(k + 1);
      layout['yaxis' + ax] = {title: {text: r.title, font: {size: 11}}, automargin: true, rangemode: 'tozero'};
      r.traces.forEach(function(t){ t.yaxis = 'y' + ax; t.xaxis = 'x'; t.mode = 'lines'; traces.push(t); });
    });
    layout.xaxis = {title: {text: 'seconds since the start'}};
    var ev = T.events;
    ev.forEach(function(e){
      if (ev.length <= 80) layout.shapes.push({type: 'line', xref: 'x', yref: 'paper', x0: e.t, x1: e.t, y0: 0, y1: 1, line: {color: EV_COLOURS[e.kind] || '#888', width: 1, dash: 'dot'}, opacity: 0.6});
    });
    if (ev.length) {
      var top = Math.max.apply(null, c.c.filter(function(v){ return v !== null; }).concat([1]));
      traces.push({x: ev.map(function(e){ return e.t; }), y: ev.map(function(){ return top; }), yaxis: 'y', xaxis: 'x', mode: 'markers', name: 'events',
        marker: {symbol: 'triangle-down', size: 10, color: ev.map(function(e){ return EV_COLOURS[e.kind] || '#888'; })},
        text: ev.map(function(e){ return e.kind + ': ' + e.text; }), hovertemplate: '%{x:.1f} s: %{text}<extra></extra>'});
    }
    jobs.push(plot('chart-timeline-' + i, traces, layout));
  });

  form.addEventListener('input', applySlo);
  Promise.all(jobs).then(function(){ applySlo(); root.setAttribute('data-report-ready', '1'); })
    .catch(function(e){ window.__redlineNote('report: ' + e); root.setAttribute('data-report-ready', '1'); });
  window.addEventListener('beforeprint', function(){
    document.querySelectorAll('.js-plotly-plot').forEach(function(gd){ try { Plotly.Plots.resize(gd); } catch (e) {} });
  });
})();
"""
