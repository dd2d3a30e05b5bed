"""The report's look: colours picked for contrast, the page's CSS and its little script.

Everything is inline, so the page works offline and as a CI artefact.  Text on a coloured
fill is black or white, whichever contrasts more (WCAG 2 relative luminance): the larger
of the two is never below 4.5:1, the AA level for body text.
"""

from __future__ import annotations

#: Fill per cell outcome (summary table, case findings).
OUTCOME_COLOURS = {
    "agree": "#2e7d32",
    "differs": "#c62828",
    "impl-defined": "#5c6bc0",
    "crash": "#6a1b9a",
    "timeout": "#ef6c00",
    "unavailable": "#9e9e9e",
    "adapter-error": "#795548",
}
NO_DATA = "#e0e0e0"


def _luminance(colour: str) -> float:
    channels = [int(colour[i : i + 2], 16) / 255 for i in (1, 3, 5)]
    linear = [c / 12.92 if c <= 0.03928 else ((c + 0.055) / 1.055) ** 2.4 for c in channels]
    return 0.2126 * linear[0] + 0.7152 * linear[1] + 0.0722 * linear[2]


def contrast(a: str, b: str) -> float:
    """The WCAG contrast ratio of two ``#rrggbb`` colours (1 to 21)."""
    light, dark = sorted((_luminance(a), _luminance(b)), reverse=True)
    return (light + 0.05) / (dark + 0.05)


def text_on(fill: str) -> str:
    """Black or white, whichever is easier to read on ``fill``."""
    return "#000000" if contrast(fill, "#000000") >= contrast(fill, "#ffffff") else "#ffffff"


def rate_colour(agree: int, judged: int) -> str:
    """Red (nothing agrees) to green (everything agrees); grey when nothing was judged."""
    if not judged:
        return NO_DATA
    rate = agree / judged
    red, green = int(230 * (1 - rate) + 25), int(180 * rate + 40)
    return f"#{red:02x}{green:02x}46"


CSS = """
body{font-family:system-ui,-apple-system,'Segoe UI',sans-serif;margin:1em 1.4em;max-width:1360px;
 color:#1a1a1a;background:#fff;line-height:1.4}
h1{margin:.2em 0} h2{margin:1.2em 0 .4em;border-bottom:2px solid #d0d4da} h3{margin:.8em 0 .3em}
a{color:#0b57d0}
table{border-collapse:collapse;margin:.4em 0}
td,th{border:1px solid #b8bec6;padding:3px 6px;font-size:13px;vertical-align:top;text-align:left;
 overflow-wrap:anywhere}
th{background:#eceff3}
table.fixed{table-layout:fixed;width:100%}
pre,code{font-family:ui-monospace,'SFMono-Regular',Menlo,Consolas,monospace;font-size:12px}
pre{white-space:pre-wrap;overflow-wrap:anywhere;word-break:break-all;margin:0;max-height:16em;
 overflow:auto;background:#f5f6f8;border:1px solid #e0e3e7;padding:3px 5px}
.none{color:#555}
.label{font-size:12px;font-weight:600;color:#333;margin:.6em 0 .15em}
.warn{background:#fff3cd;color:#1a1a1a;padding:.3em .6em;margin:.2em 0;font-size:13px}
.badge{display:inline-block;padding:0 .45em;border-radius:3px;font-size:12px;font-weight:600;
 white-space:nowrap}
.badge.new{background:#b71c1c;color:#ffffff}
.badge.baselined{background:#e3e6ea;color:#1a1a1a}
.badge.unreported{background:#ffd54f;color:#1a1a1a}
.badge.family{border:1px solid #6b7280;color:#1a1a1a;font-weight:400}
.pass{color:#1b5e20} .fail{color:#b71c1c}
.behaviour{border:1px solid #c5c9cf;border-left:6px solid #78909c;margin:.35em 0;background:#fff}
.behaviour.new{border-left-color:#b71c1c} .behaviour.unreported{border-left-color:#f9a825}
.behaviour>summary{padding:.3em .6em;cursor:pointer}
.behaviour>summary .reason{color:#333;font-size:13px}
.behaviour .body{padding:.2em .8em .7em;border-top:1px solid #e0e3e7}
.cmd{display:block;background:#1e293b;color:#f1f5f9;padding:.35em .6em;user-select:all;
 white-space:pre-wrap;overflow-wrap:anywhere}
.filters{position:sticky;top:0;z-index:2;background:#f8f9fb;border:1px solid #d0d4da;
 padding:.35em .6em;margin:.5em 0;font-size:14px}
.filters label{margin-right:1em;white-space:nowrap}
.deltas{display:flex;flex-wrap:wrap;gap:2px;list-style:none;margin:0;padding:0;max-height:10em;
 overflow:auto}
.deltas li{border:1px solid #9aa3ad;background:#fbfbfc;padding:0 3px;font-size:12px;
 font-family:ui-monospace,Menlo,Consolas,monospace;white-space:pre-wrap;overflow-wrap:anywhere;
 max-width:100%}
.deltas li sub{color:#444;font-size:10px}
.case{border-top:1px solid #d0d4da;margin-top:.8em}
[id]{scroll-margin-top:3.5em}
.matrix{overflow-x:auto}
"""

#: Filters (adapter, class, mode, status) and opening the <details> a link points into.
SCRIPT = """
(function(){
  function value(id){
    var e=document.getElementById(id);
    return e?(e.type==='checkbox'?e.checked:e.value):'';
  }
  function has(list,item){return (' '+list+' ').indexOf(' '+item+' ')>=0;}
  function apply(){
    var adapter=value('f-adapter'),klass=value('f-class'),mode=value('f-mode');
    var onlyNew=value('f-new'),unfiled=value('f-unreported'),shown=0,total=0;
    document.querySelectorAll('.behaviour').forEach(function(b){
      var ok=(!adapter||b.dataset.adapter===adapter)&&(!klass||has(b.dataset.classes,klass))
        &&(!mode||has(b.dataset.modes,mode))&&(!onlyNew||b.dataset.upstream==='new')
        &&(!unfiled||b.dataset.upstream!=='linked');
      b.hidden=!ok;total++;if(ok)shown++;
    });
    document.querySelectorAll('.adapter-findings').forEach(function(s){
      s.hidden=!!adapter&&s.dataset.adapter!==adapter;
    });
    document.querySelectorAll('.family-list').forEach(function(f){
      var any=f.querySelector('.behaviour:not([hidden])');
      f.querySelector('.nomatch').hidden=!!any||!f.querySelector('.behaviour');
    });
    var count=document.getElementById('f-count');
    if(count)count.textContent=shown+' of '+total+' behaviours shown';
  }
  function reveal(){
    var id=decodeURIComponent(location.hash.slice(1)),t=id&&document.getElementById(id);
    if(!t)return;
    for(var e=t;e;e=e.parentElement){
      if(e.tagName==='DETAILS')e.open=true;
      if(e.hidden)e.hidden=false;
    }
    t.scrollIntoView();
  }
  document.querySelectorAll('.filters select,.filters input').forEach(function(e){
    e.addEventListener('change',apply);});
  window.addEventListener('hashchange',reveal);
  apply();reveal();
})();
"""


def outcome_css() -> str:
    """One class per outcome: its fill and a readable text colour."""
    return "".join(
        f".o-{name}{{background:{fill};color:{text_on(fill)}}}"
        for name, fill in OUTCOME_COLOURS.items()
    )
