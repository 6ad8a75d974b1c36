// The admin console's script (`/admin/console.js`): plain ES2020 on the standard DOM and
// `fetch`, no library. Every view is built with `createElement` and `textContent`, so
// data from the server (record data, ids, file names, error messages) is always text,
// never markup. The admin token is kept in `sessionStorage` and sent as
// `Authorization: Bearer`; requests never carry cookies (`credentials: 'omit'`).
// SwiftPM compiles this file into outpost-server (`.embedInCode` in Package.swift);
// ConsoleAssets serves it.
(() => {
  'use strict';

  const TOKEN_KEY = 'outpost.adminToken';
  const state = { token: null, serial: 0, timers: [], blobs: [], status: null };

  // ---------- DOM ----------

  /** An element: attributes (class, text, on<event>, dataset, others as attributes) and children (nodes or text). */
  function el(tag, attrs, ...children) {
    const node = document.createElement(tag);
    for (const [key, value] of Object.entries(attrs || {})) {
      if (value === undefined || value === null || value === false) continue;
      if (key === 'class') node.className = value;
      else if (key === 'text') node.textContent = String(value);
      else if (key === 'dataset') Object.assign(node.dataset, value);
      else if (key.startsWith('on')) node.addEventListener(key.slice(2), value);
      else node.setAttribute(key, value === true ? '' : String(value));
    }
    append(node, children);
    return node;
  }

  function append(node, children) {
    for (const child of children.flat(Infinity)) {
      if (child === undefined || child === null || child === false) continue;
      node.append(child instanceof Node ? child : document.createTextNode(String(child)));
    }
    return node;
  }

  const $ = (id) => document.getElementById(id);

  function clear(node) {
    while (node.firstChild) node.removeChild(node.firstChild);
    return node;
  }

  // ---------- Formatting ----------

  const pad = (n) => String(n).padStart(2, '0');

  function formatTime(ms) {
    if (ms === null || ms === undefined) return '—';
    const d = new Date(ms);
    return `${d.getFullYear()}-${pad(d.getMonth() + 1)}-${pad(d.getDate())} ${pad(d.getHours())}:${pad(d.getMinutes())}:${pad(d.getSeconds())}`;
  }

  function ago(ms) {
    if (ms === null || ms === undefined) return '';
    const s = Math.round((Date.now() - ms) / 1000);
    if (s < 0) return 'in the future';
    if (s < 60) return `${s} s ago`;
    if (s < 3600) return `${Math.floor(s / 60)} min ago`;
    if (s < 86400) return `${Math.floor(s / 3600)} h ago`;
    return `${Math.floor(s / 86400)} d ago`;
  }

  function duration(seconds) {
    const d = Math.floor(seconds / 86400), h = Math.floor((seconds % 86400) / 3600);
    const m = Math.floor((seconds % 3600) / 60), s = Math.floor(seconds % 60);
    if (d > 0) return `${d} d ${h} h`;
    if (h > 0) return `${h} h ${m} min`;
    if (m > 0) return `${m} min ${s} s`;
    return `${s} s`;
  }

  function bytes(n) {
    if (n === null || n === undefined) return '—';
    const units = ['B', 'KiB', 'MiB', 'GiB', 'TiB'];
    let v = n, i = 0;
    while (v >= 1024 && i < units.length - 1) { v /= 1024; i++; }
    return i === 0 ? `${v} B` : `${v.toFixed(v < 10 ? 1 : 0)} ${units[i]}`;
  }

  const count = (n) => (n === null || n === undefined) ? '—' : Number(n).toLocaleString('en-US');

  function rate(n) {
    if (!isFinite(n)) return '0';
    return n >= 100 ? n.toFixed(0) : n >= 10 ? n.toFixed(1) : n.toFixed(2);
  }

  function timeCell(ms, short) {
    const text = formatTime(ms);
    const known = ms !== null && ms !== undefined;
    return el('td', { class: 'nowrap', title: known ? text + ' · ' + ago(ms) : null }, short && known ? text.slice(0, 16) : text);
  }

  /** The payload of a JWT, for showing who is signed in (the server verifies it; this only reads it). */
  function tokenClaims(token) {
    try {
      const part = token.split('.')[1].replace(/-/g, '+').replace(/_/g, '/');
      const text = atob(part + '='.repeat((4 - part.length % 4) % 4));
      const utf8 = new TextDecoder().decode(Uint8Array.from(text, (c) => c.charCodeAt(0)));
      return JSON.parse(utf8);
    } catch (e) {
      return {};
    }
  }

  // ---------- The API ----------

  class APIError extends Error {
    constructor(status, code, message) {
      super(message);
      this.status = status;
      this.code = code;
    }
  }

  /** A request to the server's API with the admin token; the error envelope becomes an APIError. */
  async function api(path, options = {}) {
    const token = options.token || state.token;
    const headers = { 'Authorization': 'Bearer ' + token, 'Accept': options.accept || 'application/json' };
    const init = { method: options.method || 'GET', headers, cache: 'no-store', credentials: 'omit', referrerPolicy: 'no-referrer' };
    if (options.body !== undefined) {
      headers['Content-Type'] = 'application/json';
      init.body = JSON.stringify(options.body);
    }
    let response;
    try {
      response = await fetch(path, init);
    } catch (e) {
      throw new APIError(0, 'network', 'The server did not answer (' + e.message + ').');
    }
    if (!response.ok) {
      let code = 'http_' + response.status, message = response.status + ' ' + response.statusText;
      try {
        const envelope = await response.json();
        if (envelope && envelope.error) { code = envelope.error.code; message = envelope.error.message; }
      } catch (e) { /* not the JSON envelope */ }
      const error = new APIError(response.status, code, message);
      if (response.status === 401 && !options.token) signOut('The server refused the token of this session: ' + message);
      throw error;
    }
    if (options.as === 'response') return response;
    if (options.as === 'text') return response.text();
    return response.json();
  }

  const q = (params) => {
    const search = new URLSearchParams();
    for (const [k, v] of Object.entries(params)) if (v !== undefined && v !== null && v !== '') search.set(k, String(v));
    const text = search.toString();
    return text ? '?' + text : '';
  };
  const seg = encodeURIComponent;

  // ---------- Sign-in ----------

  function showSignIn(message) {
    stopTimers();
    $('app').hidden = true;
    $('signin').hidden = false;
    const error = $('signin-error');
    error.textContent = message || '';
    error.hidden = !message;
    $('signin-token').focus();
  }

  function signOut(message) {
    state.token = null;
    sessionStorage.removeItem(TOKEN_KEY);
    state.serial++;
    showSignIn(message);
  }

  async function signIn(token, remember) {
    const status = await api('/v1/admin/status', { token });
    state.token = token;
    state.status = status;
    if (remember) sessionStorage.setItem(TOKEN_KEY, token);
    const claims = tokenClaims(token);
    clear($('whoami')).append(
      'Signed in as ', el('strong', { text: claims.sub || 'admin' }),
      claims.exp ? el('div', { text: 'until ' + formatTime(claims.exp * 1000).slice(0, 16) }) : null);
    $('signin').hidden = true;
    $('app').hidden = false;
    showFacts(status);
    route();
  }

  function showFacts(status) {
    clear($('topbar-facts')).append(
      el('span', {}, 'Server ', el('strong', { text: status.server })),
      el('span', {}, 'Store ', el('strong', { text: storeName(status.store) })),
      el('span', {}, 'Epoch ', el('strong', { class: 'mono', text: status.epoch })));
  }

  const storeName = (store) => store === 'postgresql' ? 'PostgreSQL' : store === 'sqlite' ? 'SQLite' : store;

  function refusal(error) {
    if (error.status === 401) return 'The server refused this token: ' + error.message;
    if (error.status === 403) return 'This token is valid but it is not an admin token (issue one with outpost-server token --admin).';
    return error.message;
  }

  // ---------- Pages and routing ----------

  const pages = {
    overview: { title: 'Overview', render: overviewPage },
    spaces: { title: 'Spaces', render: spacesPage },
    records: { title: 'Records', render: recordsPage },
    media: { title: 'Media', render: mediaPage },
    devices: { title: 'Devices', render: devicesPage },
    // Reached from a client id on Devices (no entry of its own in the navigation).
    device: { title: 'Device', render: devicePage },
    access: { title: 'Access', render: accessPage },
    tokens: { title: 'Tokens', render: tokensPage },
  };

  function parseHash() {
    const hash = location.hash.replace(/^#\/?/, '');
    const [name, query] = hash.split('?');
    return { name: pages[name] ? name : 'overview', params: new URLSearchParams(query || '') };
  }

  /** Rewrites the hash for the page's state without rendering the page again. */
  function setHash(name, params) {
    history.replaceState(null, '', '#/' + name + q(params));
  }

  function stopTimers() {
    for (const t of state.timers) clearTimeout(t);
    state.timers = [];
  }

  function revokeBlobs() {
    for (const url of state.blobs) URL.revokeObjectURL(url);
    state.blobs = [];
  }

  function route() {
    if (!state.token) return;
    stopTimers();
    revokeBlobs();
    const serial = ++state.serial;
    const { name, params } = parseHash();
    const section = name === 'device' ? 'devices' : name;
    for (const link of document.querySelectorAll('.nav-link')) link.classList.toggle('active', link.dataset.page === section);
    $('page-title').textContent = pages[name].title;
    const page = clear($('page'));
    page.dataset.page = name;
    const live = () => serial === state.serial;
    pages[name].render(page, params, live).catch((error) => {
      if (live()) page.append(alertBox(error));
    });
  }

  function alertBox(error) {
    return el('div', { class: 'alert alert-error', role: 'alert', text: error.message || String(error) });
  }

  function panel(title, note, ...body) {
    return el('div', { class: 'panel' },
      el('div', { class: 'panel-head' }, el('h2', { text: title }), note ? el('span', { class: 'muted', text: note }) : null),
      body);
  }

  function table(headers, rows, empty) {
    if (rows.length === 0) return el('div', { class: 'empty', text: empty });
    return el('div', { class: 'table-wrap' }, el('table', {},
      el('thead', {}, el('tr', {}, headers.map((h) => el('th', { class: h.num ? 'num' : null, text: h.label || h })))),
      el('tbody', {}, rows)));
  }

  // ---------- Overview ----------

  const SERIES = [
    { key: 'push', label: 'Pushes', color: '#4f46e5' },
    { key: 'pull', label: 'Pulls', color: '#0891b2' },
    { key: 'woken', label: 'Long polls woken', color: '#d97706' },
  ];
  const SAMPLES = 60;

  /** The counters the rates come from, summed over their series, from the Prometheus text of /metrics. */
  function readCounters(text) {
    const c = { push: 0, pull: 0, woken: 0, waiting: 0 };
    for (const line of text.split('\n')) {
      if (line === '' || line.startsWith('#')) continue;
      // Label values are quoted and may hold braces (route="/v1/spaces/{space}/push").
      const m = /^([A-Za-z_:][A-Za-z0-9_:]*)(\{(?:[^"}]|"(?:[^"\\]|\\.)*")*\})?\s+(\S+)/.exec(line);
      if (!m) continue;
      const value = Number(m[3]);
      if (m[1] === 'outpost_http_requests_total') {
        const r = /route="([^"]*)"/.exec(m[2] || '');
        if (r && r[1] === '/v1/spaces/{space}/push') c.push += value;
        else if (r && r[1] === '/v1/spaces/{space}/pull') c.pull += value;
      } else if (m[1] === 'outpost_long_polls_woken_total') c.woken += value;
      else if (m[1] === 'outpost_long_polls_waiting') c.waiting = value;
    }
    return c;
  }

  function drawChart(canvas, samples, color) {
    const ratio = window.devicePixelRatio || 1;
    const width = canvas.clientWidth || 300, height = canvas.clientHeight || 76;
    canvas.width = Math.round(width * ratio);
    canvas.height = Math.round(height * ratio);
    const g = canvas.getContext('2d');
    g.setTransform(ratio, 0, 0, ratio, 0, 0);
    g.clearRect(0, 0, width, height);
    const top = 12, bottom = height - 4;
    const max = Math.max(1, ...samples);
    g.strokeStyle = '#eef0f4';
    g.lineWidth = 1;
    for (let i = 0; i <= 2; i++) {
      const y = Math.round(top + (bottom - top) * i / 2) + 0.5;
      g.beginPath(); g.moveTo(0, y); g.lineTo(width, y); g.stroke();
    }
    g.fillStyle = '#9ca3af';
    g.font = '10px ' + getComputedStyle(document.body).fontFamily;
    g.textBaseline = 'top';
    g.fillText(rate(max) + '/s', 2, 0);
    if (samples.length < 2) return;
    const step = width / (SAMPLES - 1);
    const x0 = width - step * (samples.length - 1);
    const y = (v) => bottom - (bottom - top) * (v / max);
    g.beginPath();
    samples.forEach((v, i) => { const x = x0 + step * i; if (i === 0) g.moveTo(x, y(v)); else g.lineTo(x, y(v)); });
    g.strokeStyle = color;
    g.lineWidth = 2;
    g.lineJoin = 'round';
    g.stroke();
    g.lineTo(x0 + step * (samples.length - 1), bottom);
    g.lineTo(x0, bottom);
    g.closePath();
    g.globalAlpha = 0.12;
    g.fillStyle = color;
    g.fill();
    g.globalAlpha = 1;
  }

  async function overviewPage(page, params, live) {
    const facts = el('div', { class: 'grid grid-4' });
    const stat = (label, id, mono) => el('div', { class: 'panel stat' },
      el('div', { class: 'stat-label', text: label }),
      el('div', { class: 'stat-value' + (mono ? ' mono' : ''), id }),
      el('div', { class: 'stat-note', id: id + '-note' }));
    facts.append(stat('Epoch', 'fact-epoch', true), stat('Uptime', 'fact-uptime'), stat('Store', 'fact-store'), stat('Server', 'fact-server'));

    const interval = el('select', { id: 'refresh-interval', 'aria-label': 'Refresh every' },
      [1, 2, 5, 10].map((s) => el('option', { value: s * 1000, selected: s === 2, text: `every ${s} s` })));
    const charts = el('div', { class: 'grid grid-3' });
    const views = {};
    for (const s of SERIES) {
      const value = el('span', { class: 'chart-rate', id: 'rate-' + s.key, text: '–' });
      const canvas = el('canvas', { class: 'chart', id: 'chart-' + s.key, dataset: { samples: '0' } });
      const note = el('span', { class: 'muted', id: 'note-' + s.key });
      views[s.key] = { value, canvas, note, samples: [] };
      charts.append(el('div', { class: 'panel chart-card' },
        el('div', { class: 'chart-top' }, el('div', { class: 'stat-label', text: s.label + ' / s' }), note),
        el('div', {}, value, el('span', { class: 'chart-unit', text: 'per second' })),
        canvas));
    }
    const errorsBody = el('div', { id: 'errors' });
    page.append(facts,
      el('div', { class: 'panel' },
        el('div', { class: 'panel-head' }, el('h2', { text: 'Traffic' }),
          el('div', { class: 'row' }, el('span', { class: 'muted', text: 'Rates from /metrics between polls' }), interval)),
        el('div', { class: 'panel-body' }, charts)),
      panel('Recent errors', 'The last error answers of this server, newest first', errorsBody));

    let previous = null;
    // A change of interval starts a new chain of polls; the old chain stops at its next step.
    let chain = 0;
    const poll = async (mine) => {
      if (!live() || mine !== chain) return;
      try {
        const [status, metrics, errors] = await Promise.all([
          api('/v1/admin/status'), api('/metrics', { as: 'text', accept: 'text/plain' }), api('/v1/admin/errors?limit=25')]);
        if (!live() || mine !== chain) return;
        showStatus(status);
        const counters = readCounters(metrics);
        const now = performance.now();
        if (previous) {
          const dt = (now - previous.at) / 1000;
          for (const s of SERIES) {
            const delta = counters[s.key] - previous.counters[s.key];
            const view = views[s.key];
            view.samples.push(delta >= 0 && dt > 0 ? delta / dt : 0);
            if (view.samples.length > SAMPLES) view.samples.shift();
            view.value.textContent = rate(view.samples[view.samples.length - 1]);
            view.canvas.dataset.samples = String(view.samples.length);
            drawChart(view.canvas, view.samples, s.color);
          }
        }
        views.push.note.textContent = count(counters.push) + ' in all';
        views.pull.note.textContent = count(counters.pull) + ' in all';
        views.woken.note.textContent = count(counters.waiting) + ' waiting now';
        previous = { at: now, counters };
        showErrors(errorsBody, errors);
      } catch (error) {
        if (!live() || mine !== chain) return;
        clear(errorsBody).append(alertBox(error));
      }
      if (live() && mine === chain) state.timers.push(setTimeout(() => poll(mine), Number(interval.value)));
    };
    interval.addEventListener('change', () => { stopTimers(); poll(++chain); });
    for (const s of SERIES) drawChart(views[s.key].canvas, [], s.color);
    await poll(chain);
  }

  function showStatus(status) {
    $('fact-epoch').textContent = status.epoch;
    $('fact-epoch-note').textContent = 'protocol ' + status.protocolVersion;
    $('fact-uptime').textContent = duration(status.uptimeSeconds);
    $('fact-uptime-note').textContent = 'since ' + formatTime(status.startedAt);
    $('fact-store').textContent = storeName(status.store);
    $('fact-store-note').textContent = status.store === 'sqlite' ? 'embedded, one file' : 'shared by instances';
    $('fact-server').textContent = status.server;
    $('fact-server-note').textContent = 'clock ' + formatTime(status.now);
  }

  function showErrors(body, answer) {
    const rows = answer.errors.map((e) => el('tr', { title: 'request ' + e.requestId },
      timeCell(e.at),
      el('td', { class: 'cell-mono', text: e.method || '—' }),
      el('td', { class: 'cell-mono', text: e.route || '(no route)' }),
      el('td', {}, el('span', { class: 'badge ' + (e.status >= 500 ? 'badge-bad' : 'badge-warn'), text: e.status })),
      el('td', { class: 'cell-mono', text: e.code }),
      el('td', { class: 'error-message', text: e.message })));
    clear(body).append(table(['Time', 'Method', 'Route', 'Status', 'Code', 'Message'], rows,
      'No error answers since the server started.'));
  }

  // ---------- Spaces ----------

  async function spacesPage(page, params, live) {
    const body = el('tbody', { id: 'spaces-rows' });
    const more = el('button', { class: 'button button-small', id: 'spaces-more', type: 'button', text: 'Load more' });
    const shown = el('span', { id: 'spaces-count' });
    page.append(el('div', { class: 'panel' },
      el('div', { class: 'panel-head' }, el('h2', { text: 'Spaces' }), el('span', { class: 'muted', text: 'Spaces that have been written to, by name' })),
      el('div', { class: 'table-wrap' }, el('table', {},
        el('thead', {}, el('tr', {},
          ['Space', 'Records', 'Tombstones', 'Head', 'Last write', 'Media files', 'Media bytes', 'Horizon', 'Record bytes', ''].map((h, i) =>
            el('th', { class: i > 0 && i < 9 && i !== 4 ? 'num' : null, text: h })))),
        body)),
      el('div', { class: 'panel-foot' }, shown, more)));
    const list = pagedList(page, live, { body, more, shown, key: 'spaces', noun: 'spaces', colspan: 10, empty: 'No space has been written to yet.',
      path: (after) => '/v1/admin/spaces' + q({ after, limit: 50 }),
      row: (s) => el('tr', { dataset: { space: s.name } },
        el('td', {}, el('a', { href: '#/records' + q({ space: s.name }), class: 'cell-mono', text: s.name })),
        el('td', { class: 'num', text: count(s.records) }),
        el('td', { class: 'num', text: count(s.tombstones) }),
        el('td', { class: 'num', text: count(s.head) }),
        timeCell(s.lastWriteAt),
        el('td', { class: 'num', text: count(s.mediaFiles) }),
        el('td', { class: 'num', text: bytes(s.mediaBytes) + (s.mediaBytesLimit == null ? '' : ' of ' + bytes(s.mediaBytesLimit)) }),
        el('td', { class: 'num', text: count(s.horizon) }),
        el('td', { class: 'num', text: bytes(s.recordBytes) + (s.recordBytesLimit == null ? '' : ' of ' + bytes(s.recordBytesLimit)) }),
        el('td', { class: 'nowrap' },
          el('a', { href: '#/records' + q({ space: s.name }), text: 'Records' }), ' · ',
          el('a', { href: '#/media' + q({ space: s.name }), text: 'Media' }))) });
    await list.load();
  }

  // A list an admin route answers page by page ({<key>: [...], next}): `load` appends the
  // next page's rows (`row` makes one), then the count and the "Load more" button follow;
  // `reset` empties it for a new query.
  function pagedList(page, live, { body, more, shown, key, noun, colspan, empty, path, row }) {
    let next = '';
    let total = 0;
    const load = async () => {
      more.disabled = true;
      const answer = await api(path(next));
      if (!live()) return;
      for (const item of answer[key]) body.append(row(item));
      total += answer[key].length;
      if (total === 0) body.append(el('tr', {}, el('td', { colspan, class: 'empty', text: empty })));
      next = answer.next;
      shown.textContent = count(total) + (next ? ` ${noun} shown, more follow` : ` ${noun}`);
      more.hidden = !next;
      more.disabled = false;
    };
    more.addEventListener('click', () => load().catch((e) => page.append(alertBox(e))));
    return { load, reset: () => { clear(body); next = ''; total = 0; } };
  }

  // ---------- Records ----------

  /** Pretty JSON as spans: keys, strings, numbers and literals each in their colour, all as text. */
  function jsonView(value, indent = '') {
    const out = [];
    const punct = (t) => el('span', { class: 'j-punct', text: t });
    const inner = indent + '  ';
    if (Array.isArray(value)) {
      if (value.length === 0) return [punct('[]')];
      out.push(punct('[\n'));
      value.forEach((v, i) => { out.push(inner, ...jsonView(v, inner)); out.push(punct(i < value.length - 1 ? ',\n' : '\n')); });
      out.push(indent, punct(']'));
    } else if (value !== null && typeof value === 'object') {
      const keys = Object.keys(value);
      if (keys.length === 0) return [punct('{}')];
      out.push(punct('{\n'));
      keys.forEach((k, i) => {
        out.push(inner, el('span', { class: 'j-key', text: JSON.stringify(k) }), punct(': '), ...jsonView(value[k], inner));
        out.push(punct(i < keys.length - 1 ? ',\n' : '\n'));
      });
      out.push(indent, punct('}'));
    } else if (typeof value === 'string') {
      out.push(el('span', { class: 'j-str', text: JSON.stringify(value) }));
    } else if (typeof value === 'number') {
      out.push(el('span', { class: 'j-num', text: String(value) }));
    } else {
      out.push(el('span', { class: 'j-lit', text: String(value) }));
    }
    return out;
  }

  function preview(record) {
    if (record.deleted) return 'deleted';
    const text = JSON.stringify(record.data);
    return text.length > 160 ? text.slice(0, 159) + '…' : text;
  }

  function spaceField(id, value) {
    const list = el('datalist', { id: id + '-list' });
    api('/v1/admin/spaces' + q({ limit: 200 })).then((answer) => {
      for (const s of answer.spaces) list.append(el('option', { value: s.name }));
    }).catch(() => {});
    return {
      input: el('input', { type: 'text', id, list: id + '-list', value: value || '', placeholder: 'team-1', spellcheck: 'false', autocomplete: 'off' }),
      list,
    };
  }

  async function recordsPage(page, params, live) {
    const space = spaceField('records-space', params.get('space'));
    const open = el('button', { class: 'button button-primary', type: 'submit', id: 'records-open', text: 'Open' });
    const form = el('form', { class: 'toolbar', id: 'records-form' },
      el('div', { class: 'field' }, el('label', { for: 'records-space', text: 'Space' }), space.input, space.list), open);
    const collections = el('ul', { class: 'list', id: 'collections' });
    const moreCollections = el('button', { class: 'button button-small', type: 'button', id: 'collections-more', text: 'More', hidden: true });
    const browser = el('div', { id: 'records-browser' });
    const detail = el('div', { id: 'record-detail' });
    const layout = el('div', { class: 'split', hidden: true },
      el('div', { class: 'panel' }, el('div', { class: 'panel-head' }, el('h2', { text: 'Collections' })), collections,
        el('div', { class: 'panel-foot' }, el('span', { id: 'collections-count' }), moreCollections)),
      el('div', { class: 'grid' }, browser, detail));
    page.append(el('div', { class: 'panel' }, el('div', { class: 'panel-body' }, form)), layout);

    let current = { space: '', collection: '', prefix: '' };
    let collectionsNext = '';
    let shownCollections = 0;

    const loadCollections = async () => {
      moreCollections.disabled = true;
      const answer = await api(`/v1/admin/spaces/${seg(current.space)}/collections` + q({ after: collectionsNext, limit: 100 }));
      if (!live()) return;
      for (const c of answer.collections) {
        const button = el('button', { type: 'button', dataset: { collection: c.name } }, el('span', { class: 'mono', text: c.name }));
        button.addEventListener('click', () => { showCollection(c.name, '', ''); });
        collections.append(el('li', {}, button));
      }
      shownCollections += answer.collections.length;
      $('collections-count').textContent = shownCollections === 0 ? 'No records in this space' : count(shownCollections) + (answer.next ? ' shown' : ' in all');
      collectionsNext = answer.next;
      moreCollections.hidden = !answer.next;
      moreCollections.disabled = false;
    };
    moreCollections.addEventListener('click', () => loadCollections().catch((e) => browser.append(alertBox(e))));

    const openSpace = async (name, collection, prefix, id) => {
      current = { space: name, collection: '', prefix: '' };
      collectionsNext = '';
      shownCollections = 0;
      clear(collections); clear(browser); clear(detail);
      layout.hidden = false;
      setHash('records', { space: name });
      await loadCollections();
      if (collection) await showCollection(collection, prefix || '', id || '');
    };

    // A collection's records, a page at a time; `cursors` holds the `after` of each page shown so far.
    const showCollection = async (collection, prefix, id) => {
      current.collection = collection;
      current.prefix = prefix;
      for (const b of collections.querySelectorAll('button')) b.classList.toggle('active', b.dataset.collection === collection);
      setHash('records', { space: current.space, collection, prefix, id });
      clear(detail);
      const search = el('input', { type: 'text', id: 'records-prefix', value: prefix, placeholder: 'id prefix', spellcheck: 'false', autocomplete: 'off' });
      const size = el('select', { id: 'records-limit', 'aria-label': 'Records per page' },
        [25, 50, 100].map((n) => el('option', { value: n, selected: n === 25, text: `${n} a page` })));
      const rows = el('tbody', { id: 'records-rows' });
      const prev = el('button', { class: 'button button-small', type: 'button', id: 'records-prev', text: '← Previous' });
      const next = el('button', { class: 'button button-small', type: 'button', id: 'records-next', text: 'Next →' });
      const where = el('span', { id: 'records-page' });
      const searchForm = el('form', { class: 'row', id: 'records-search' }, search,
        el('button', { class: 'button', type: 'submit', text: 'Search' }), size);
      clear(browser).append(el('div', { class: 'panel' },
        el('div', { class: 'panel-head' },
          el('h2', {}, el('span', { class: 'mono', text: collection })),
          searchForm),
        el('div', { class: 'table-wrap' }, el('table', { class: 'fixed' },
          el('colgroup', {}, ['c-id', 'c-version', 'c-time', 'c-by', 'c-size', 'c-data'].map((c) => el('col', { class: c }))),
          el('thead', {}, el('tr', {}, ['Id', 'Seq', 'Updated', 'By', 'Size', 'Data'].map((h) =>
            el('th', { class: h === 'Size' ? 'num' : null, text: h })))),
          rows)),
        el('div', { class: 'panel-foot' }, where, el('div', { class: 'pager' }, prev, next))));

      const cursors = [''];
      let nextCursor = null;
      const loadPage = async () => {
        prev.disabled = true; next.disabled = true;
        const after = cursors[cursors.length - 1];
        const answer = await api(`/v1/admin/spaces/${seg(current.space)}/collections/${seg(collection)}/records` +
          q({ after, prefix: current.prefix, limit: size.value }));
        if (!live() || current.collection !== collection) return;
        clear(rows);
        for (const r of answer.records) {
          const dataBytes = r.deleted ? 0 : new TextEncoder().encode(JSON.stringify(r.data)).length;
          const row = el('tr', { class: 'clickable', dataset: { id: r.id } },
            el('td', { class: 'cell-id', title: r.id, text: r.id }),
            el('td', { class: 'cell-mono nowrap', title: r.version, text: r.version.split('.').pop() }),
            timeCell(r.updatedAt, true),
            el('td', { class: 'cell-mono', text: r.updatedBy }),
            el('td', { class: 'num', text: r.deleted ? '—' : bytes(dataBytes) }),
            el('td', { class: 'cell-preview' }, r.deleted ? el('span', { class: 'badge badge-bad', text: 'deleted' }) : preview(r)));
          row.addEventListener('click', () => {
            for (const other of rows.querySelectorAll('tr.selected')) other.classList.remove('selected');
            row.classList.add('selected');
            showRecord(r.id).catch((e) => clear(detail).append(alertBox(e)));
          });
          rows.append(row);
        }
        if (answer.records.length === 0) {
          rows.append(el('tr', {}, el('td', { colspan: 6, class: 'empty',
            text: current.prefix ? `No record id starts with “${current.prefix}”.` : 'No records in this collection.' })));
        }
        nextCursor = answer.next;
        where.textContent = `Page ${cursors.length} · ${answer.records.length} records` + (answer.next ? '' : ' · last page');
        prev.disabled = cursors.length === 1;
        next.disabled = !answer.next;
      };
      const fail = (e) => browser.append(alertBox(e));
      next.addEventListener('click', () => { if (nextCursor) { cursors.push(nextCursor); loadPage().catch(fail); } });
      prev.addEventListener('click', () => { if (cursors.length > 1) { cursors.pop(); loadPage().catch(fail); } });
      size.addEventListener('change', () => { cursors.length = 1; loadPage().catch(fail); });
      searchForm.addEventListener('submit', (event) => {
        event.preventDefault();
        current.prefix = search.value;
        cursors.length = 1;
        setHash('records', { space: current.space, collection, prefix: current.prefix });
        loadPage().catch(fail);
      });
      await loadPage();
      if (id) await showRecord(id);
    };

    const showRecord = async (id) => {
      const collection = current.collection;
      const r = await api(`/v1/admin/spaces/${seg(current.space)}/collections/${seg(collection)}/record` + q({ id }));
      if (!live() || current.collection !== collection) return;
      setHash('records', { space: current.space, collection, prefix: current.prefix, id });
      const meta = (k, v, id, title) => el('div', {}, el('div', { class: 'k', text: k }), el('div', { class: 'v', id, title, text: v }));
      const json = el('pre', { class: 'json', id: 'record-json' }, r.deleted ? el('span', { class: 'j-lit', text: 'deleted: this record is a tombstone' }) : jsonView(r.data));
      const copy = el('button', { class: 'button button-small', type: 'button', text: 'Copy JSON' });
      copy.addEventListener('click', () => copyText(JSON.stringify(r, null, 2), copy));
      clear(detail).append(el('div', { class: 'panel', id: 'record-panel' },
        el('div', { class: 'panel-head' },
          el('h2', {}, el('span', { class: 'mono', text: r.collection + ' / ' }), el('span', { class: 'mono', id: 'record-id', text: r.id })),
          el('div', { class: 'row' }, r.deleted ? el('span', { class: 'badge badge-bad', text: 'tombstone' }) : el('span', { class: 'badge badge-ok', text: 'live' }), copy)),
        el('div', { class: 'panel-body' },
          el('div', { class: 'meta' },
            meta('Version', r.version, 'record-version'),
            meta('Updated at', formatTime(r.updatedAt), 'record-updated', String(r.updatedAt)),
            meta('Updated by', r.updatedBy),
            meta('Written by subject', r.subject === undefined ? '—' : r.subject, 'record-subject'),
            meta('Client time', r.clientTime === undefined ? '—' : formatTime(r.clientTime), null,
              r.clientTime === undefined ? null : String(r.clientTime)),
            meta('Lineage', r.lineage || '—'),
            meta('Same as', r.sameAs || '—'),
            meta('Resolved', r.resolved ? `${r.resolved.outcome} by ${r.resolved.resolver} over ${r.resolved.over}` : '—', 'record-resolved')),
          json)));
    };

    form.addEventListener('submit', (event) => {
      event.preventDefault();
      const name = space.input.value.trim();
      if (name) openSpace(name).catch((e) => { clear(browser).append(alertBox(e)); });
    });
    if (params.get('space')) await openSpace(params.get('space'), params.get('collection'), params.get('prefix'), params.get('id'));
  }

  function copyText(text, button) {
    const done = () => { const label = button.textContent; button.textContent = 'Copied'; setTimeout(() => { button.textContent = label; }, 1500); };
    if (navigator.clipboard && window.isSecureContext) {
      navigator.clipboard.writeText(text).then(done, () => fallbackCopy(text) && done());
    } else if (fallbackCopy(text)) {
      done();
    }
  }

  /** Copies through a selected text area, for pages served over plain HTTP where the Clipboard API is absent. */
  function fallbackCopy(text) {
    const area = el('textarea', { class: 'token-box' });
    area.value = text;
    document.body.append(area);
    area.select();
    let ok = false;
    try { ok = document.execCommand('copy'); } catch (e) { ok = false; }
    area.remove();
    return ok;
  }

  // ---------- Media ----------

  const PREVIEW_LIMIT = 16 * 1024 * 1024;

  async function mediaPage(page, params, live) {
    const space = spaceField('media-space', params.get('space'));
    const form = el('form', { class: 'toolbar', id: 'media-form' },
      el('div', { class: 'field' }, el('label', { for: 'media-space', text: 'Space' }), space.input, space.list),
      el('button', { class: 'button button-primary', type: 'submit', text: 'Open' }));
    const list = el('div', { id: 'media-list' });
    const viewer = el('div', { id: 'media-viewer' });
    page.append(el('div', { class: 'panel' }, el('div', { class: 'panel-body' }, form)), list, viewer);

    const open = async (name) => {
      setHash('media', { space: name });
      clear(viewer);
      const rows = el('tbody', { id: 'media-rows' });
      const prev = el('button', { class: 'button button-small', type: 'button', id: 'media-prev', text: '← Previous' });
      const next = el('button', { class: 'button button-small', type: 'button', id: 'media-next', text: 'Next →' });
      const where = el('span', {});
      clear(list).append(el('div', { class: 'panel' },
        el('div', { class: 'panel-head' }, el('h2', {}, 'Files of ', el('span', { class: 'mono', text: name })),
          el('span', { class: 'muted', text: 'By media id (the SHA-256)' })),
        el('div', { class: 'table-wrap' }, el('table', { class: 'fixed' },
          el('colgroup', {}, ['c-name', 'c-type', 'c-size', 'c-time', 'c-data'].map((c) => el('col', { class: c }))),
          el('thead', {}, el('tr', {}, ['File name', 'Type', 'Size', 'Created', 'Media id'].map((h) =>
            el('th', { class: h === 'Size' ? 'num' : null, text: h })))),
          rows)),
        el('div', { class: 'panel-foot' }, where, el('div', { class: 'pager' }, prev, next))));
      const cursors = [''];
      let nextCursor = null;
      const load = async () => {
        prev.disabled = true; next.disabled = true;
        const answer = await api(`/v1/admin/spaces/${seg(name)}/media` + q({ after: cursors[cursors.length - 1], limit: 25 }));
        if (!live()) return;
        clear(rows);
        for (const m of answer.media) {
          const row = el('tr', { class: 'clickable', dataset: { media: m.mediaId } },
            el('td', { class: 'cell-id', text: m.filename === null ? '(no name)' : m.filename }),
            el('td', { class: 'cell-mono', text: m.contentType }),
            el('td', { class: 'num', text: bytes(m.size) }),
            timeCell(m.createdAt),
            el('td', { class: 'cell-mono', title: m.mediaId, text: m.mediaId.slice(0, 16) + '…' }));
          row.addEventListener('click', () => {
            for (const other of rows.querySelectorAll('tr.selected')) other.classList.remove('selected');
            row.classList.add('selected');
            showMedia(viewer, m, live).catch((e) => clear(viewer).append(alertBox(e)));
          });
          rows.append(row);
        }
        if (answer.media.length === 0) rows.append(el('tr', {}, el('td', { colspan: 5, class: 'empty', text: 'No media in this space.' })));
        nextCursor = answer.next;
        where.textContent = `Page ${cursors.length} · ${answer.media.length} files` + (answer.next ? '' : ' · last page');
        prev.disabled = cursors.length === 1;
        next.disabled = !answer.next;
      };
      const fail = (e) => list.append(alertBox(e));
      next.addEventListener('click', () => { if (nextCursor) { cursors.push(nextCursor); load().catch(fail); } });
      prev.addEventListener('click', () => { if (cursors.length > 1) { cursors.pop(); load().catch(fail); } });
      await load();
    };
    form.addEventListener('submit', (event) => {
      event.preventDefault();
      const name = space.input.value.trim();
      if (name) open(name).catch((e) => { clear(list).append(alertBox(e)); });
    });
    if (params.get('space')) await open(params.get('space'));
  }

  /** The file's bytes, fetched with the admin token into a blob URL (an <img> cannot send the header itself). */
  async function mediaBlob(m) {
    const response = await api(m.url, { as: 'response', accept: '*/*' });
    const blob = await response.blob();
    const url = URL.createObjectURL(blob);
    state.blobs.push(url);
    return url;
  }

  async function showMedia(viewer, m, live) {
    revokeBlobs();
    const frame = el('div', { class: 'preview-frame', id: 'media-preview' });
    const download = el('button', { class: 'button', type: 'button', text: 'Download' });
    download.addEventListener('click', async () => {
      try {
        const url = await mediaBlob(m);
        const a = el('a', { href: url, download: m.filename || m.mediaId });
        document.body.append(a);
        a.click();
        a.remove();
      } catch (e) { viewer.append(alertBox(e)); }
    });
    const info = (k, v) => el('div', {}, el('div', { class: 'k', text: k }), el('div', { class: 'v', text: v }));
    clear(viewer).append(el('div', { class: 'panel' },
      el('div', { class: 'panel-head' }, el('h2', { class: 'mono', text: m.filename === null ? m.mediaId : m.filename }), download),
      el('div', { class: 'panel-body preview' }, frame,
        el('div', { class: 'meta' }, info('Type', m.contentType), info('Size', bytes(m.size) + ' (' + count(m.size) + ' bytes)'),
          info('Created', formatTime(m.createdAt)), info('SHA-256', m.mediaId)))));
    if (!m.contentType.toLowerCase().startsWith('image/')) {
      frame.append(el('span', { class: 'muted', text: 'No preview for ' + m.contentType }));
      return;
    }
    if (m.size > PREVIEW_LIMIT) {
      frame.append(el('span', { class: 'muted', text: 'Too large to preview (' + bytes(m.size) + ')' }));
      return;
    }
    frame.append(el('span', { class: 'muted', text: 'Loading…' }));
    const url = await mediaBlob(m);
    if (!live()) return;
    const img = el('img', { id: 'media-preview-img', alt: m.filename || m.mediaId });
    img.addEventListener('load', () => { img.dataset.loaded = 'true'; });
    img.addEventListener('error', () => { clear(frame).append(el('span', { class: 'muted', text: 'The browser cannot show this image.' })); });
    img.src = url;
    clear(frame).append(img);
  }

  // ---------- Devices ----------

  // The conflicts each space's devices reported (GET /v1/admin/conflicts): counts only,
  // the values stay in each device's conflict journal.
  async function conflictsPanel(page, live) {
    const body = el('tbody', { id: 'conflicts-rows' });
    const more = el('button', { class: 'button button-small', type: 'button', text: 'Load more', hidden: true });
    const shown = el('span', { id: 'conflicts-count' });
    page.append(el('div', { class: 'panel' },
      el('div', { class: 'panel-head' }, el('h2', { text: 'Conflicts per space' }),
        el('span', { class: 'muted', text: 'Conflicts devices reported, and of them those their resolver decided (kept in the device\'s journal)' })),
      el('div', { class: 'table-wrap' }, el('table', {},
        el('thead', {}, el('tr', {}, ['Space', 'Devices', 'Conflicts', 'Decided by the resolver'].map((h, i) =>
          el('th', { class: i > 0 ? 'num' : null, text: h })))),
        body)),
      el('div', { class: 'panel-foot' }, shown, more)));
    const list = pagedList(page, live, { body, more, shown, key: 'spaces', noun: 'spaces', colspan: 4, empty: 'No device has reported.',
      path: (after) => '/v1/admin/conflicts' + q({ after, limit: 100 }),
      row: (s) => el('tr', { dataset: { space: s.space } },
        el('td', { class: 'cell-mono', text: s.space }),
        el('td', { class: 'num', text: count(s.devices) }),
        el('td', { class: 'num', text: count(s.conflicts) }),
        el('td', { class: 'num', text: count(s.resolved) })) });
    await list.load();
  }

  async function devicesPage(page, params, live) {
    const spaceInput = el('input', { type: 'text', id: 'devices-space', placeholder: 'all spaces', value: params.get('space') || '', spellcheck: 'false' });
    const quiet = el('input', { type: 'number', id: 'devices-quiet', min: 0, max: 87600, placeholder: 'any', value: params.get('notSeenForHours') || '' });
    const form = el('form', { class: 'toolbar', id: 'devices-form' },
      el('div', { class: 'field' }, el('label', { for: 'devices-space', text: 'Space' }), spaceInput),
      el('div', { class: 'field' }, el('label', { for: 'devices-quiet', text: 'Not seen for (hours)' }), quiet),
      el('button', { class: 'button button-primary', type: 'submit', text: 'Apply' }));
    const rows = el('tbody', { id: 'devices-rows' });
    const more = el('button', { class: 'button button-small', type: 'button', text: 'Load more', hidden: true });
    const shown = el('span', {});
    page.append(el('div', { class: 'panel' }, el('div', { class: 'panel-body' }, form)),
      el('div', { class: 'panel' },
        el('div', { class: 'panel-head' }, el('h2', { text: 'Devices' }), el('span', { class: 'muted', text: 'The last state each device reported' })),
        el('div', { class: 'table-wrap' }, el('table', {},
          el('thead', {}, el('tr', {}, ['Space', 'Client', 'SDK', 'Last seen', 'Last sync', 'Pending', 'Conflicts', 'Last error', 'Clock offset', 'Reports'].map((h) =>
            el('th', { class: ['Pending', 'Conflicts', 'Clock offset', 'Reports'].includes(h) ? 'num' : null, text: h })))),
          rows)),
        el('div', { class: 'panel-foot' }, shown, more)));
    await conflictsPanel(page, live);
    const list = pagedList(page, live, { body: rows, more, shown, key: 'devices', noun: 'devices', colspan: 10, empty: 'No device has reported.',
      path: (after) => '/v1/admin/devices' + q({ space: spaceInput.value.trim(), notSeenForHours: quiet.value, after, limit: 50 }),
      row: (d) => el('tr', {},
        el('td', { class: 'cell-mono', text: d.space }),
        el('td', {}, deviceLink(d.space, d.clientId, null)),
        el('td', { class: 'cell-mono', text: d.sdkVersion }),
        timeCell(d.lastSeenAt),
        timeCell(d.lastSyncAt),
        el('td', { class: 'num', text: count(d.pending) }),
        el('td', { class: 'num', text: count(d.conflicts) + ' (' + count(d.resolved) + ' decided)' }),
        el('td', {}, d.lastError === null ? el('span', { class: 'badge badge-ok', text: 'ok' }) : el('span', { class: 'badge badge-bad', text: d.lastError })),
        el('td', { class: 'num', text: d.clockOffsetMs === null ? '—' : d.clockOffsetMs + ' ms' }),
        el('td', { class: 'num', text: count(d.reports) })) });
    form.addEventListener('submit', (event) => {
      event.preventDefault();
      setHash('devices', { space: spaceInput.value.trim(), notSeenForHours: quiet.value });
      list.reset();
      list.load().catch((e) => page.append(alertBox(e)));
    });
    await list.load();
  }

  // ---------- Device: a space's devices and one device's sync, as the server sees them ----------

  /** "12 commits · 3 min" behind the head, or "at the head"; "—" without a pull of this epoch. */
  function behindText(b) {
    if (!b) return '—';
    if (b.commits === 0) return 'at the head';
    return count(b.commits) + (b.commits === 1 ? ' commit · ' : ' commits · ') + duration(b.ms / 1000);
  }

  function deviceLink(space, clientId, staleHours) {
    return el('a', { class: 'cell-mono', href: '#/device' + q({ space, staleAfterHours: staleHours, clientId }), text: clientId });
  }

  /** One device's facts, its view and its last errors (GET /v1/admin/spaces/{space}/devices/{clientId}). */
  function showDevice(out, space, d) {
    const facts = [
      ['Client', d.clientId], ['Subject', d.subject === null ? '—' : d.subject],
      ['SDK', d.sdkVersion === null ? '—' : d.sdkVersion], ['App version', d.appVersion === null ? '—' : String(d.appVersion)],
      ['Last push', formatTime(d.lastPushAt)], ['Last pull', formatTime(d.lastPullAt)],
      ['Last report', formatTime(d.lastReportAt)], ['Cursor', d.cursor === null ? '—' : d.cursor],
      ['Head', count(d.head)], ['Behind the head', behindText(d.behind)],
      ['Pending', count(d.pending)], ['Rejected (last sync)', count(d.rejected)],
      ['Quarantined', count(d.quarantined)], ['Held for an upgrade', count(d.upgradeRequired)],
      ['Conflicts', count(d.conflicts) + ' (' + count(d.resolved) + ' decided)'],
      ['Clock offset', d.clockOffsetMs === null ? '—' : d.clockOffsetMs + ' ms'],
    ];
    const view = d.view === null
      ? el('p', { class: 'muted', text: 'No pull under rules yet (or no rules file): every record of the space.' })
      : el('div', {},
        el('p', {}, 'View ', el('code', { id: 'device-view-id', text: d.view.id }), ', read from these claims of its token:'),
        table(['Claim', 'Value'], Object.entries(d.view.claims).map(([k, v]) =>
          el('tr', {}, el('td', { class: 'cell-mono', text: k }), el('td', { class: 'cell-mono', text: v === null ? '—' : JSON.stringify(v) }))),
          'The read rules read no claim.'));
    const errors = table([{ label: 'Sync started (device clock)' }, 'Error'], (d.lastErrors || []).map((e) =>
      el('tr', {}, timeCell(e.startedAt), el('td', {}, el('span', { class: 'badge badge-bad', text: e.error })))), 'No reported sync failed.');
    clear(out).append(
      panel('Device ' + d.clientId, d.stale ? 'Quiet: not seen for longer than the chosen time' : 'Seen ' + ago(d.lastActiveAt),
        el('div', { class: 'panel-body' },
          el('dl', { class: 'facts', id: 'device-facts' }, facts.map(([k, v]) => el('div', {}, el('dt', { text: k }), el('dd', { text: v })))))),
      panel('The view it pulls under', null, el('div', { class: 'panel-body' }, view)),
      panel('Last errors', 'From its reported syncs, newest first', errors));
  }

  async function devicePage(page, params, live) {
    const space = spaceField('device-space', params.get('space'));
    const stale = el('input', { type: 'number', id: 'device-stale', min: 0, max: 87600, value: params.get('staleAfterHours') || '24' });
    const form = el('form', { class: 'toolbar', id: 'device-form' },
      el('div', { class: 'field' }, el('label', { for: 'device-space', text: 'Space' }), space.input, space.list),
      el('div', { class: 'field' }, el('label', { for: 'device-stale', text: 'Quiet after (hours)' }), stale),
      el('button', { class: 'button button-primary', type: 'submit', text: 'Show' }));
    const rows = el('tbody', { id: 'device-rows' });
    const more = el('button', { class: 'button button-small', type: 'button', text: 'Load more', hidden: true });
    const shown = el('span', {});
    const detail = el('div', { id: 'device-detail' });
    page.append(el('div', { class: 'panel' }, el('div', { class: 'panel-body' }, form)), detail,
      el('div', { class: 'panel' },
        el('div', { class: 'panel-head' }, el('h2', { text: 'Devices of the space' }),
          el('span', { class: 'muted', text: 'Quiet ones first; from their pushes, pulls and reports' })),
        el('div', { class: 'table-wrap' }, el('table', {},
          el('thead', {}, el('tr', {}, ['Client', 'Subject', 'App', 'Last push', 'Last pull', 'Behind the head', 'Pending', 'Rejected', 'Quarantined', 'Held', 'Last error'].map((h) =>
            el('th', { class: ['Pending', 'Rejected', 'Quarantined', 'Held'].includes(h) ? 'num' : null, text: h })))),
          rows)),
        el('div', { class: 'panel-foot' }, shown, more)));
    const staleSeconds = () => String(Math.round(Number(stale.value || '24') * 3600));
    const list = pagedList(page, live, { body: rows, more, shown, key: 'devices', noun: 'devices', colspan: 11, empty: 'The server has seen no device in this space.',
      path: (after) => '/v1/admin/spaces/' + encodeURIComponent(space.input.value.trim()) + '/devices' + q({ staleAfter: staleSeconds(), after, limit: 50 }),
      row: (d) => el('tr', { dataset: { client: d.clientId }, class: d.stale ? 'row-stale' : null },
        el('td', {}, deviceLink(space.input.value.trim(), d.clientId, stale.value), d.stale ? el('span', { class: 'badge badge-bad', text: 'quiet' }) : null),
        el('td', { class: 'cell-mono', text: d.subject === null ? '—' : d.subject }),
        el('td', { class: 'num', text: d.appVersion === null ? '—' : String(d.appVersion) }),
        timeCell(d.lastPushAt), timeCell(d.lastPullAt),
        el('td', { class: 'nowrap', text: behindText(d.behind) }),
        el('td', { class: 'num', text: count(d.pending) }),
        el('td', { class: 'num', text: count(d.rejected) }),
        el('td', { class: 'num', text: count(d.quarantined) }),
        el('td', { class: 'num', text: count(d.upgradeRequired) }),
        el('td', {}, d.lastError === null ? el('span', { class: 'badge badge-ok', text: d.reports > 0 ? 'ok' : 'no report' }) : el('span', { class: 'badge badge-bad', text: d.lastError }))) });
    const show = async () => {
      const name = space.input.value.trim();
      if (!name) return;
      list.reset();
      clear(detail);
      const clientId = params.get('clientId');
      if (clientId) {
        const d = await api('/v1/admin/spaces/' + encodeURIComponent(name) + '/devices/' + encodeURIComponent(clientId) + q({ staleAfter: staleSeconds() }));
        if (!live()) return;
        showDevice(detail, name, d);
      }
      await list.load();
    };
    form.addEventListener('submit', (event) => {
      event.preventDefault();
      params.delete('clientId');
      setHash('device', { space: space.input.value.trim(), staleAfterHours: stale.value });
      show().catch((e) => page.append(alertBox(e)));
    });
    await show();
  }

  // ---------- Access: a record's rules explained, and what a subject sees ----------

  /** The subject and claims fields both panels share; `read()` gives them as the routes take them, or throws. */
  function subjectFields(prefix, params) {
    const subject = el('input', { type: 'text', id: prefix + '-subject', placeholder: 'worker-17', value: params.get('subject') || '', spellcheck: 'false', autocomplete: 'off' });
    const claims = el('textarea', { id: prefix + '-claims', rows: 3, spellcheck: 'false', placeholder: '{"team": "north", "roles": ["inspector"]}' });
    claims.value = params.get('claims') || '';
    return {
      subject, claims,
      read() {
        const text = claims.value.trim();
        let parsed = {};
        if (text) {
          try { parsed = JSON.parse(text); } catch (e) { throw new Error('The claims are not JSON: ' + e.message); }
          if (parsed === null || typeof parsed !== 'object' || Array.isArray(parsed)) throw new Error('The claims must be a JSON object.');
        }
        return { subject: subject.value.trim(), claims: parsed };
      },
    };
  }

  const verdictBadge = (ok, yes, no) => el('span', { class: 'badge ' + (ok ? 'badge-ok' : 'badge-bad'), text: ok ? yes : no });

  /** A rule's evaluation, one line per sub-expression it evaluated, indented by depth. */
  function traceList(trace) {
    if (!trace || trace.length === 0) return el('div', { class: 'empty', text: 'Nothing evaluated.' });
    return el('ol', { class: 'trace' }, trace.map((step) => el('li', { class: 'trace-step', dataset: { depth: String(step.depth) } },
      el('span', { class: 'trace-indent', text: '\u2003'.repeat(step.depth) }),
      el('code', { class: 'trace-expr', text: step.expression }),
      step.compared ? el('span', { class: 'trace-compared' }, ': ', el('code', { text: step.compared })) : null,
      el('span', { class: 'trace-arrow', text: ' \u2192 ' }),
      el('code', { class: 'trace-value ' + (step.value === true ? 'is-true' : step.value === false ? 'is-false' : ''),
        text: step.valuePreview !== undefined ? step.valuePreview : JSON.stringify(step.value) }))));
  }

  function writeSection(title, id, write) {
    return el('div', { class: 'stack', id },
      el('h3', {}, title + ' ', verdictBadge(write.verdict, 'allowed', 'refused')),
      write.refusal ? el('p', { class: 'muted', text: write.refusal.code + ': ' + write.refusal.message }) : null,
      write.scopeAllows === false ? el('p', { class: 'muted', text: 'The token\u2019s scope or spaces do not allow a push here.' }) : null,
      write.schema ? el('p', {}, 'Schema ', verdictBadge(write.schema.verdict, write.schema.declared === false ? 'none declared' : 'valid', 'invalid'),
        write.schema.message ? ' ' + write.schema.message : '') : null,
      write.conditions.map((c, i) => el('div', { class: 'stack' },
        el('p', {}, 'Condition ' + (i + 1) + ' ', verdictBadge(c.verdict, 'true', 'false'), c.reason ? el('span', { class: 'muted', text: ' (' + c.reason + ')' }) : null),
        traceList(c.trace))));
  }

  function showExplanation(out, a) {
    const read = a.read;
    out.append(panel('Explanation', a.rules ? 'Rules file ' + a.rules : 'No rules file: a token for the space reads and writes every record',
      el('div', { class: 'panel-body stack', id: 'explain-answer' },
        el('div', { class: 'kv' },
          el('span', {}, 'Subject ', el('strong', { text: a.subject })),
          el('span', {}, 'Record ', el('strong', { class: 'mono', text: a.collection + '/' + a.id })),
          el('span', {}, 'View ', el('strong', { class: 'mono', text: a.view || '—' })),
          el('span', { id: 'explain-in-view' }, 'In view now ', verdictBadge(a.inView, 'yes', 'no'))),
        a.record ? el('pre', { class: 'json', id: 'explain-record' }, jsonView(a.record.deleted ? { deleted: true, version: a.record.version } : a.record.data))
          : el('p', { class: 'muted', text: 'No such record.' }),
        el('h3', {}, 'Read ', verdictBadge(read.verdict, 'admits', 'refuses'), read.from ? el('span', { class: 'muted', text: ' (rule of ' + (read.from === 'default' ? 'the default' : 'the collection') + ')' }) : null),
        read.rule ? el('code', { class: 'rule-source', text: read.rule }) : null,
        read.note ? el('p', { class: 'muted', text: read.note }) : null,
        el('div', { id: 'explain-read-trace' }, traceList(read.trace)),
        writeSection('Put', 'explain-put', a.put),
        writeSection('Delete', 'explain-delete', a.delete))));
  }

  function showView(out, a) {
    const counts = Object.entries(a.counts);
    out.append(panel('What ' + a.subject + ' sees', a.view ? 'View ' + a.view : 'No rules file: the whole space',
      el('div', { class: 'panel-body stack', id: 'view-answer' },
        el('div', { class: 'kv' },
          el('span', {}, 'Records ', el('strong', { id: 'view-total', text: String(a.records.length) })),
          el('span', {}, 'Pages read ', el('strong', { text: String(a.pages) })),
          el('span', {}, 'More after these ', el('strong', { text: a.hasMore ? 'yes' : 'no' })),
          a.spaceAllowed ? null : el('span', { class: 'badge badge-bad', text: 'the claims do not name this space' })),
        table(['Collection', { label: 'Records', num: true }], counts.map(([name, n]) => el('tr', {}, el('td', { class: 'cell-mono', text: name }), el('td', { class: 'num', text: String(n) }))), 'Nothing in view.'),
        table(['Collection', 'Id', 'Version', 'Data'], a.records.map((r) => el('tr', {},
          el('td', { class: 'cell-mono', text: r.collection }), el('td', { class: 'cell-mono', text: r.id }),
          el('td', { class: 'cell-mono', text: r.version }), el('td', { class: 'cell-preview', text: preview(r) }))), 'No records.'))));
  }

  async function accessPage(page, params, live) {
    const field = (label, id, input, extra) => el('div', { class: 'field' }, el('label', { for: id, text: label }), input, extra);
    // Explain.
    const space = spaceField('explain-space', params.get('space'));
    const collection = el('input', { type: 'text', id: 'explain-collection', placeholder: 'inspections', value: params.get('collection') || '', spellcheck: 'false' });
    const id = el('input', { type: 'text', id: 'explain-id', placeholder: 'insp-0042', value: params.get('id') || '', spellcheck: 'false' });
    const who = subjectFields('explain', params);
    const problem = el('div', { id: 'explain-error' });
    const out = el('div', { id: 'explain-result' });
    const explainForm = el('form', { id: 'explain-form' },
      el('div', { class: 'form-grid' },
        field('Space', 'explain-space', space.input, space.list), field('Subject', 'explain-subject', who.subject),
        field('Collection', 'explain-collection', collection), field('Record id', 'explain-id', id)),
      field('Claims (JSON, as a token would carry them)', 'explain-claims', who.claims),
      el('div', { class: 'row actions' }, el('button', { class: 'button button-primary', type: 'submit', id: 'explain-submit', text: 'Explain' }),
        el('span', { class: 'muted', text: 'Evaluated by the server\u2019s rules engine; nothing is written and no token is made.' })),
      problem);
    // See what they see.
    const viewSpace = spaceField('view-space', params.get('space'));
    const viewWho = subjectFields('view', params);
    const pagesInput = el('input', { type: 'number', id: 'view-pages', min: 1, max: 5, value: '1' });
    const viewProblem = el('div', { id: 'view-error' });
    const viewOut = el('div', { id: 'view-result' });
    const viewForm = el('form', { id: 'view-form' },
      el('div', { class: 'form-grid' },
        field('Space', 'view-space', viewSpace.input, viewSpace.list), field('Subject', 'view-subject', viewWho.subject),
        field('Pages (of 50 records)', 'view-pages', pagesInput)),
      field('Claims (JSON)', 'view-claims', viewWho.claims),
      el('div', { class: 'row actions' }, el('button', { class: 'button button-primary', type: 'submit', id: 'view-submit', text: 'See what they see' }),
        el('span', { class: 'muted', text: 'The first pages a pull from the start would return, read by the pull itself.' })),
      viewProblem);
    page.append(panel('Explain a record\u2019s rules', 'Why a subject may or may not read or write it', el('div', { class: 'panel-body' }, explainForm)), out,
      panel('See what they see', 'A subject\u2019s pull, without a token', el('div', { class: 'panel-body' }, viewForm)), viewOut);

    async function submit(event, form, problemBox, result, path, body, show) {
      event.preventDefault();
      clear(problemBox);
      clear(result);
      const button = form.querySelector('button[type=submit]');
      button.disabled = true;
      try {
        const answer = await api(path, { method: 'POST', body: body() });
        if (live()) show(result, answer);
      } catch (e) {
        if (live()) problemBox.append(alertBox(e));
      } finally {
        button.disabled = false;
      }
    }
    explainForm.addEventListener('submit', (event) => submit(event, explainForm, problem, out,
      '/v1/admin/spaces/' + seg(space.input.value.trim()) + '/explain',
      () => Object.assign(who.read(), { collection: collection.value.trim(), id: id.value }), showExplanation));
    viewForm.addEventListener('submit', (event) => submit(event, viewForm, viewProblem, viewOut,
      '/v1/admin/spaces/' + seg(viewSpace.input.value.trim()) + '/view',
      () => Object.assign(viewWho.read(), { pages: Number(pagesInput.value) || 1 }), showView));
  }

  // ---------- Tokens ----------

  const LIFETIMES = [[900, '15 minutes'], [3600, '1 hour'], [86400, '1 day'], [604800, '7 days'], [2592000, '30 days']];

  async function tokensPage(page, params, live) {
    const space = spaceField('token-space', params.get('space'));
    const sub = el('input', { type: 'text', id: 'token-sub', placeholder: 'user-42', spellcheck: 'false', autocomplete: 'off' });
    const scope = el('select', { id: 'token-scope' }, el('option', { value: 'read', text: 'read: pull and download' }),
      el('option', { value: 'write', text: 'write: push, upload, and read' }));
    const ttl = el('select', { id: 'token-ttl' }, LIFETIMES.map(([s, label]) => el('option', { value: s, selected: s === 3600, text: label })));
    const issue = el('button', { class: 'button button-primary', type: 'submit', id: 'token-issue', text: 'Issue token' });
    const problem = el('div', { id: 'token-error' });
    const result = el('div', { id: 'token-result' });
    const field = (label, id, input, extra) => el('div', { class: 'field' }, el('label', { for: id, text: label }), input, extra);
    const form = el('form', { id: 'token-form' },
      el('div', { class: 'form-grid' },
        field('Subject (the token\u2019s sub)', 'token-sub', sub),
        field('Space', 'token-space', space.input, space.list),
        field('Scope', 'token-scope', scope),
        field('Lifetime', 'token-ttl', ttl)),
      el('div', { class: 'row actions', id: 'token-actions' }, issue,
        el('span', { class: 'muted', text: 'The token names this one space; it is never an admin token.' })),
      problem);
    page.append(panel('Issue a token', 'Signed with this server\u2019s key', el('div', { class: 'panel-body' }, form)), result);
    form.addEventListener('submit', async (event) => {
      event.preventDefault();
      clear(problem);
      clear(result);
      issue.disabled = true;
      try {
        const answer = await api('/v1/admin/tokens', { method: 'POST',
          body: { sub: sub.value.trim(), space: space.input.value.trim(), scope: scope.value, ttlSeconds: Number(ttl.value) } });
        if (!live()) return;
        showToken(result, answer);
      } catch (e) {
        if (live()) problem.append(alertBox(e));
      } finally {
        issue.disabled = false;
      }
    });
  }

  function showToken(result, answer) {
    const box = el('textarea', { class: 'token-box', id: 'token-value', rows: 4, readonly: true, spellcheck: 'false' });
    box.value = answer.token;
    const copy = el('button', { class: 'button button-primary', type: 'button', id: 'token-copy', text: 'Copy token' });
    copy.addEventListener('click', () => copyText(answer.token, copy));
    const example = el('pre', { class: 'json', id: 'token-example',
      text: `curl -H "Authorization: Bearer $TOKEN" ${location.origin}/v1/spaces/${answer.spaces[0]}/pull` });
    result.append(panel('Token issued', 'Shown once: copy it now, it is kept nowhere',
      el('div', { class: 'panel-body stack' },
        el('div', { class: 'kv' },
          el('span', {}, 'Subject ', el('strong', { text: answer.sub })),
          el('span', {}, 'Space ', el('strong', { text: answer.spaces[0] })),
          el('span', {}, 'Scope ', el('strong', { text: answer.scope })),
          el('span', {}, 'Expires ', el('strong', { text: formatTime(answer.expiresAt) }))),
        box,
        el('div', { class: 'row', id: 'token-copy-row' }, copy, el('span', { class: 'muted', text: 'Use it as a bearer token, for example:' })),
        example)));
  }

  // ---------- Start ----------

  document.addEventListener('DOMContentLoaded', () => {
    $('signin-form').addEventListener('submit', async (event) => {
      event.preventDefault();
      const token = $('signin-token').value.trim();
      if (!token) { showSignIn('Paste an admin token first.'); return; }
      const button = $('signin-submit');
      button.disabled = true;
      try {
        await signIn(token, true);
        $('signin-token').value = '';
      } catch (error) {
        showSignIn(refusal(error));
      } finally {
        button.disabled = false;
      }
    });
    $('signout').addEventListener('click', () => signOut(''));
    window.addEventListener('hashchange', route);
    const saved = sessionStorage.getItem(TOKEN_KEY);
    if (saved) {
      signIn(saved, false).catch((error) => { sessionStorage.removeItem(TOKEN_KEY); showSignIn(refusal(error)); });
    } else {
      showSignIn('');
    }
  });
})();
