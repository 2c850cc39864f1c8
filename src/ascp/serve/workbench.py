"""The workbench page the service serves at /: attribute a request and read its sentences against the
passages (the component of `ascp attribute --html`), and browse the results below --root (the page
of `ascp view`, the report's tables and figures). Self-contained: inline CSS and script, no network
but the service itself. The page holds no data; with an API key, every call it makes sends the key
typed into it (kept for the browser tab only)."""

from __future__ import annotations

import json

from ascp.render.html import SENTENCE_SCRIPT, STYLE

EXAMPLE = {
    "id": "example", "question": "When was the Eiffel Tower built?",
    "passages": [
        {"id": "eiffel", "title": "Eiffel Tower", "text": "The Eiffel Tower was built from 1887 to 1889 in Paris."},
        {"id": "louvre", "title": "Louvre", "text": "The Louvre is the world's most-visited art museum."},
        {"id": "expo", "title": "Exposition Universelle",
         "text": "The 1889 World's Fair marked the centennial of the French Revolution; the tower was its entrance."},
    ],
    "response": "The Eiffel Tower was built between 1887 and 1889. It stands in Paris.",
}

LAYOUT = (
    "<style>body{margin:16px}.ascp .tabs button{margin-right:6px}.ascp .tabs .on{font-weight:700}"
    ".ascp textarea{width:100%;height:14em;font-family:monospace;font-size:12px}.ascp .error{color:#b00}"
    ".ascp .entries div{cursor:pointer;padding:2px 0}.ascp .entries .kind{color:#666;margin-left:8px}"
    ".ascp iframe{width:100%;height:60em;border:1px solid #ddd}.ascp img{max-width:100%}"
    ".ascp .hidden{display:none}.ascp pre{background:#f4f4f4;padding:6px;white-space:pre-wrap}</style>"
)

SCRIPT = """<script>
(function () {
  var $ = function (id) { return document.getElementById(id); };
  function headers(json) {
    var h = json ? {'Content-Type': 'application/json'} : {};
    var key = $('key') ? $('key').value : '';
    if (key) h['X-API-Key'] = key;
    return h;
  }
  async function call(method, url, body) {
    var resp = await fetch(url, {method: method, headers: headers(body !== undefined),
                                 body: body === undefined ? undefined : JSON.stringify(body)});
    if (!resp.ok) {
      var text = await resp.text(), sentence = text;
      try { sentence = JSON.parse(text).error || text; } catch (e) {}
      throw new Error(resp.status + ': ' + sentence);
    }
    return resp;
  }
  function fail(where, err) { $(where).textContent = err.message; $(where).classList.remove('hidden'); }
  if ($('key')) {
    $('key').value = sessionStorage.getItem('ascp-key') || '';
    $('key').addEventListener('change', function () {
      sessionStorage.setItem('ascp-key', $('key').value); $('attr-error').classList.add('hidden'); estimators();
    });
  }
  document.querySelectorAll('[data-tab]').forEach(function (b) {
    b.addEventListener('click', function () {
      document.querySelectorAll('[data-tab]').forEach(function (o) {
        o.classList.toggle('on', o === b); $(o.getAttribute('data-tab')).classList.toggle('hidden', o !== b);
      });
      if (b.getAttribute('data-tab') === 'browse-tab' && !$('entries').hasChildNodes()) browse('.');
    });
  });
  async function estimators() {
    try {
      var list = await (await call('GET', '/v1/estimators')).json();
      $('estimator').innerHTML = '';
      list.forEach(function (e) {
        var o = document.createElement('option'); o.value = e.name;
        o.textContent = e.name + (e.token_readings ? '' : ' (whole response only)'); $('estimator').appendChild(o);
      });
      $('estimator').value = 'loo';
    } catch (err) { fail('attr-error', err); }
  }
  $('file').addEventListener('change', async function () {
    var text = await $('file').files[0].text();
    $('request').value = JSON.stringify(JSON.parse(text.trim().split('\\n')[0]), null, 2);
  });
  $('run').addEventListener('click', async function () {
    $('attr-error').classList.add('hidden'); $('result').innerHTML = ''; $('status').textContent = 'probing...';
    try {
      var request = JSON.parse($('request').value);
      request.estimator = $('estimator').value;
      if ($('sentences').checked) request.spans = 'sentences'; else delete request.spans;
      if ($('sentence-sources').checked) request.sources = 'sentences'; else delete request.sources;
      var record = await (await call('POST', '/v1/attribute', request)).json();
      var drawn = await (await call('POST', '/v1/render/attribution', {record: record})).json();
      $('result').innerHTML = '<h2>' + escapeHtml(record.id + ': ' + (request.question || '')) + '</h2>' + drawn.html;
      window.ascpRecordShades($('result'));
      $('status').textContent = record.estimator + ': ' + record.used.length + ' of ' +
        Object.keys(record.scores).length + (record.sources === 'sentences' ? ' sentences' : ' passages') +
        ' used, ' + record.tokens_processed + ' tokens fed, ' +
        record.seconds.toFixed(2) + ' s';
      document.body.setAttribute('data-attributed', record.id);
    } catch (err) { $('status').textContent = ''; fail('attr-error', err); }
  });
  function escapeHtml(s) { var d = document.createElement('div'); d.textContent = s; return d.innerHTML; }
  async function browse(path) {
    $('browse-error').classList.add('hidden'); $('note').textContent = '';
    try {
      var listing = await (await call('GET', '/v1/browse?path=' + encodeURIComponent(path))).json();
      $('where').textContent = listing.path + (listing.kind !== 'folder' ? ' (' + listing.kind + ')' : '');
      var box = $('entries'); box.innerHTML = '';
      if (listing.path !== '.') box.appendChild(entry({name: '..', path: listing.path + '/..', kind: 'folder'}));
      listing.entries.forEach(function (e) { box.appendChild(entry(e)); });
      if (listing.kind === 'run' || listing.kind === 'simulation' || listing.kind === 'store') await view(listing.path);
      else { $('view').classList.add('hidden'); }
    } catch (err) { fail('browse-error', err); }
  }
  function entry(e) {
    var div = document.createElement('div');
    div.setAttribute('data-path', e.path); div.setAttribute('data-kind', e.kind);
    div.innerHTML = escapeHtml(e.name) + (e.kind === 'file' ? '' : '/') +
                    '<span class="kind">' + escapeHtml(e.kind === 'file' ? e.bytes + ' bytes' : e.kind) + '</span>';
    div.addEventListener('click', function () { e.kind === 'file' ? open(e.path) : browse(e.path); });
    return div;
  }
  async function view(path) {
    var resp = await call('GET', '/v1/view?path=' + encodeURIComponent(path));
    $('note').textContent = resp.headers.get('X-Ascp-Note') || '';
    $('view').srcdoc = await resp.text(); $('view').classList.remove('hidden'); $('shown').classList.add('hidden');
  }
  async function open(path) {
    $('browse-error').classList.add('hidden');
    try {
      var resp = await call('GET', '/v1/files?path=' + encodeURIComponent(path));
      var type = resp.headers.get('content-type');
      var box = $('shown'); box.innerHTML = ''; box.classList.remove('hidden'); $('view').classList.add('hidden');
      if (type.indexOf('image/') === 0) {
        var img = document.createElement('img'); img.src = URL.createObjectURL(await resp.blob());
        img.setAttribute('data-file', path); box.appendChild(img);
      } else {
        var pre = document.createElement('pre'); pre.textContent = await resp.text();
        pre.setAttribute('data-file', path); box.appendChild(pre);
      }
    } catch (err) { fail('browse-error', err); }
  }
  estimators();
  document.body.setAttribute('data-ready', '1');
})();
</script>"""


def workbench_page(needs_key: bool, browses: bool) -> str:
    """The page at /; `needs_key`: a field for the API key; `browses`: the browse tab (--root given)."""
    key = ("<label>API key <input id='key' type='password' size='24'></label> " if needs_key else "")
    browse_tab = ("<button data-tab='browse-tab'>Browse results</button>" if browses else "")
    browse = ("<div id='browse-tab' class='hidden'><div>folder: <b id='where'></b> <span id='note' class='kind'>"
              "</span></div><div id='browse-error' class='error hidden'></div><div id='entries' class='entries'>"
              "</div><div id='shown' class='hidden'></div><iframe id='view' class='hidden' title='results'></iframe>"
              "</div>" if browses else "")
    example = json.dumps(EXAMPLE, indent=2, ensure_ascii=False)
    return (
        "<!DOCTYPE html><html><head><meta charset='utf-8'><title>ascp workbench</title>"
        f"{STYLE}{LAYOUT}</head><body><div class='ascp' style='max-width:72em'>"
        "<h1 style='font-size:18px'>ascp workbench</h1>"
        f"<div class='tabs'>{key}<button class='on' data-tab='attribute-tab'>Attribute</button>{browse_tab}</div>"
        "<div id='attribute-tab'><p>A request in <code>ascp attribute</code>'s format (response null: the model "
        "writes one). Select a sentence of the answer to see the passages it used.</p>"
        f"<textarea id='request' spellcheck='false'>{_escape(example)}</textarea>"
        "<div><input type='file' id='file' accept='.json,.jsonl'> estimator <select id='estimator'></select> "
        "<label><input type='checkbox' id='sentences' checked> per sentence</label> "
        "<label><input type='checkbox' id='sentence-sources'> the passages' sentences as sources</label> "
        "<button id='run'>Run</button> <span id='status'></span></div>"
        "<div id='attr-error' class='error hidden'></div><div id='result'></div></div>"
        f"{browse}</div>{SENTENCE_SCRIPT}{SCRIPT}</body></html>"
    )


def _escape(text: str) -> str:
    from html import escape

    return escape(text, quote=False)
