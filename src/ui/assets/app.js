// The dashboard's pages, drawn in the browser from the JSON API under
// /ui/api/. Every name, payload and attribute goes into the page as text
// (text nodes, never innerHTML), and the server's CSP runs no inline code.

const POLL_MS = 2000;
const main = document.getElementById('main');
let page = null; // { refresh(): Promise, dispose?() }
let timer = null;
let rateMemory = new Map(); // key -> { value, at }: rates from successive counts

// h('a', { href: '#/' }, 'text', child): an element; strings become text nodes.
function h(tag, props, ...children) {
  const el = document.createElement(tag);
  for (const [key, value] of Object.entries(props || {})) {
    if (value === undefined || value === null || value === false) continue;
    if (key.startsWith('on')) el.addEventListener(key.slice(2), value);
    else if (key === 'class') el.className = value;
    else if (key in el && typeof value !== 'string') el[key] = value;
    else el.setAttribute(key, value === true ? '' : String(value));
  }
  for (const child of children.flat()) {
    if (child === undefined || child === null || child === false) continue;
    el.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
  return el;
}

const enc = encodeURIComponent;
const topicPath = (t) => `topics/${enc(t)}`;
const subPath = (t, s) => `topics/${enc(t)}/subscriptions/${enc(s)}`;

class ApiError extends Error {
  constructor(status, message) { super(message); this.status = status; }
}

async function api(path, options = {}) {
  const response = await fetch(`api/${path}`, {
    credentials: 'same-origin',
    headers: options.body ? { 'Content-Type': 'application/json' } : {},
    ...options,
  });
  if (response.status === 401) {
    // The session ended: the server shows the login form at /ui/.
    window.location.replace('./');
    throw new ApiError(401, 'logged out');
  }
  let body = {};
  try { body = await response.json(); } catch (_) { /* empty */ }
  if (!response.ok) throw new ApiError(response.status, body.error || response.statusText);
  return body;
}

const post = (path, body) => api(path, { method: 'POST', body: JSON.stringify(body || {}) });

// Counts are plain digits; absent values a dash.
const count = (n) => (n === null || n === undefined ? '—' : String(n));

function age(ms) {
  if (ms === null || ms === undefined) return '—';
  const s = Math.floor(ms / 1000);
  if (s < 60) return `${s} s`;
  if (s < 3600) return `${Math.floor(s / 60)} min ${s % 60} s`;
  return `${Math.floor(s / 3600)} h ${Math.floor((s % 3600) / 60)} min`;
}

const time = (ms) => (ms ? new Date(ms).toISOString().replace('T', ' ').replace(/\.\d+Z$/, ' UTC') : '—');

function bytes(n) {
  if (n === null || n === undefined) return '—';
  const units = ['B', 'KiB', 'MiB', 'GiB', 'TiB'];
  let i = 0;
  while (n >= 1024 && i < units.length - 1) { n /= 1024; i += 1; }
  return `${i ? n.toFixed(1) : n} ${units[i]}`;
}

// Per second, from the last two readings of a counter (null until two).
function rate(key, value) {
  const now = Date.now();
  const last = rateMemory.get(key);
  rateMemory.set(key, { value, at: now });
  if (!last || now === last.at || value < last.value) return last ? last.rate ?? null : null;
  const r = ((value - last.value) * 1000) / (now - last.at);
  rateMemory.get(key).rate = r;
  return r;
}
const perSecond = (r) => (r === null || r === undefined ? '—' : `${r.toFixed(1)}/s`);

function card(label, id) {
  return h('div', { class: 'card' }, h('div', { class: 'label' }, label), h('div', { class: 'value', id, 'data-testid': id }, '—'));
}
function set(id, text, cls) {
  const el = document.getElementById(id);
  if (!el) return;
  el.textContent = text;
  if (cls !== undefined) el.className = `value ${cls}`;
}

function notice(text, isError) {
  const el = h('div', { class: isError ? 'notice error' : 'notice', role: 'status' }, text);
  main.prepend(el);
  setTimeout(() => el.remove(), 8000);
}

// A modal confirmation; with `word`, the user types it first.
function confirmAction(text, word) {
  const dialog = document.getElementById('confirm');
  const input = document.getElementById('confirm-input');
  const ok = document.getElementById('confirm-ok');
  document.getElementById('confirm-text').textContent = text;
  document.getElementById('confirm-typed').hidden = !word;
  document.getElementById('confirm-word').textContent = word || '';
  input.value = '';
  ok.disabled = Boolean(word);
  input.oninput = () => { ok.disabled = input.value !== word; };
  dialog.returnValue = '';
  dialog.showModal();
  if (word) input.focus();
  return new Promise((resolve) => {
    dialog.addEventListener('close', () => resolve(dialog.returnValue === 'ok'), { once: true });
  });
}

// A table of `columns` over `body`, a <tbody> its page fills and refills.
function table(columns, body) {
  return h('table', {},
    h('thead', {}, h('tr', {}, columns.map((c) => h('th', { class: c.num ? 'num' : '' }, c.label)))),
    body);
}

// ---- Overview ----
function overviewPage() {
  main.replaceChildren(
    h('h1', {}, 'Overview'),
    h('div', { class: 'cards' },
      card('Version', 'version'), card('Redis', 'redis'), card('Topology', 'topology'),
      card('Redis memory', 'memory'), card('Publishing', 'publishing'),
      card('Background loops', 'loops'), card('Ready', 'ready'), card('Replicas seen', 'replicas')),
  );
  return {
    async refresh() {
      const o = await api('overview');
      const r = o.redis;
      set('version', o.version);
      set('redis', r.reachable ? 'reachable' : 'unreachable', r.reachable ? 'ok' : 'error');
      set('topology', r.topology);
      set('memory', r.max_memory_bytes
        ? `${bytes(r.fullest_used_bytes)} of ${bytes(r.max_memory_bytes)} (${Math.round(r.memory_fraction * 100)} %; publishing refused at ${Math.round(r.publish_refusal_fraction * 100)} %)`
        : `${bytes(r.used_memory_bytes)} (no maxmemory)`);
      set('publishing', r.refusing_publishes ? 'refused: Redis too full' : 'accepted', r.refusing_publishes ? 'error' : 'ok');
      set('loops', o.background_loops.healthy ? 'all running' : `stopped: ${o.background_loops.stopped.join(', ')}`,
        o.background_loops.healthy ? 'ok' : 'error');
      set('ready', o.ready ? 'yes' : 'no', o.ready ? 'ok' : 'error');
      set('replicas', o.replicas ? `${o.replicas.length}: ${o.replicas.join(', ')}` : '—');
    },
  };
}

// ---- Topics ----
function topicsPage() {
  const columns = [
    { key: 'name', label: 'Topic' }, { key: 'kind', label: 'Kind' },
    { key: 'length', label: 'Length', num: true }, { key: 'scheduled', label: 'Scheduled', num: true },
    { key: 'next_due_ms', label: 'Next due', num: true }, { key: 'subscriptions', label: 'Subscriptions', num: true },
    { key: 'rate', label: 'Publish rate', num: true }, { key: 'dropped', label: 'Dropped', num: true },
  ];
  let sort = { key: 'name', desc: false };
  let rows = [];
  const filter = h('input', { type: 'search', placeholder: 'Filter topics', 'aria-label': 'Filter topics', oninput: () => draw() });
  const body = h('tbody', {});
  const head = h('tr', {}, columns.map((c) => h('th', { class: c.num ? 'num' : '' },
    h('button', { type: 'button', onclick: () => { sort = { key: c.key, desc: sort.key === c.key ? !sort.desc : c.num }; draw(); } }, c.label))));
  main.replaceChildren(h('h1', {}, 'Topics'), h('div', { class: 'toolbar' }, filter),
    h('table', { id: 'topics' }, h('thead', {}, head), body));
  function draw() {
    const f = filter.value.trim().toLowerCase();
    const shown = rows.filter((t) => !f || t.name.toLowerCase().includes(f) || t.kind.toLowerCase().includes(f));
    shown.sort((a, b) => {
      const x = a[sort.key] ?? -1; const y = b[sort.key] ?? -1;
      const c = typeof x === 'string' ? x.localeCompare(y) : x - y;
      return sort.desc ? -c : c;
    });
    body.replaceChildren(...shown.map((t) => h('tr', {},
      h('td', {}, h('a', { href: `#/${topicPath(t.name)}` }, t.name), t.unavailable ? h('span', { class: 'warn' }, ' (unreachable)') : null),
      h('td', {}, t.kind), h('td', { class: 'num' }, count(t.length)), h('td', { class: 'num' }, count(t.scheduled)),
      h('td', { class: 'num' }, time(t.next_due_ms)), h('td', { class: 'num' }, count(t.subscriptions)),
      h('td', { class: 'num' }, perSecond(t.rate)), h('td', { class: 'num' }, count(t.dropped)))));
    if (!shown.length) body.replaceChildren(h('tr', {}, h('td', { colspan: columns.length, class: 'muted' }, rows.length ? 'No topic matches.' : 'No topics yet.')));
  }
  return {
    async refresh() {
      const { topics } = await api('topics');
      rows = topics.map((t) => ({ ...t, rate: rate(`published:${t.name}`, t.published) }));
      draw();
    },
  };
}

// ---- A topic ----
function messageRow(m, extra) {
  const attrs = Object.entries(m.attributes || {});
  return h('tr', {},
    h('td', {}, h('code', {}, m.message_id)),
    h('td', {}, m.due_ms ? `due ${time(m.due_ms)}` : time(m.publish_time_ms)),
    h('td', {}, attrs.length ? h('pre', {}, attrs.map(([k, v]) => `${k}=${v}`).join('\n')) : ''),
    h('td', {}, h('pre', { class: 'payload' }, m.payload ?? ''),
      h('span', { class: 'muted' }, `${m.payload_format || ''} · ${count(m.payload_bytes)} bytes${m.payload_truncated ? ' (start shown)' : ''}`)),
    extra ? h('td', {}, extra) : null);
}

function topicPage(name) {
  const t = (id) => `topic-${id}`;
  const subsBody = h('tbody', {});
  const browser = h('section', { id: 'messages' });
  const scheduled = h('section', { id: 'scheduled' });
  main.replaceChildren(
    h('h1', {}, 'Topic ', h('span', { id: 'topic-name' }, name)),
    h('div', { class: 'cards' }, card('Kind', t('kind')), card('Length', t('length')), card('Scheduled', t('scheduled')),
      card('Next due', t('next-due')), card('Published', t('published')), card('Publish rate', t('rate')), card('Dropped', t('dropped'))),
    h('h2', {}, 'Subscriptions'),
    table([{ label: 'Subscription' }, { label: 'Lag', num: true }, { label: 'Pending', num: true },
      { label: 'Oldest unacked', num: true }, { label: 'Dead letters', num: true }, { label: 'Consumers', num: true }], subsBody),
    browser, scheduled);
  let drawn = false;
  return {
    async refresh() {
      const topic = await api(topicPath(name));
      set(t('kind'), topic.kind + (topic.list_key ? ` (list ${topic.list_key})` : ''));
      set(t('length'), count(topic.length));
      set(t('scheduled'), count(topic.scheduled));
      set(t('next-due'), time(topic.next_due_ms));
      set(t('published'), count(topic.published));
      set(t('rate'), perSecond(rate(`published:${name}`, topic.published)));
      set(t('dropped'), count(topic.dropped));
      subsBody.replaceChildren(...topic.subscriptions.map((s) => h('tr', {},
        h('td', {}, h('a', { href: `#/${subPath(name, s.name)}` }, s.name)),
        h('td', { class: 'num' }, count(s.lag)), h('td', { class: 'num' }, count(s.pending)),
        h('td', { class: 'num' }, age(s.oldest_unacked_age_ms)), h('td', { class: 'num' }, count(s.dead_letters)),
        h('td', { class: 'num' }, count(s.consumers)))));
      if (!topic.subscriptions.length) subsBody.replaceChildren(h('tr', {}, h('td', { colspan: 6, class: 'muted' }, 'No subscriptions.')));
      if (!drawn) {
        drawn = true;
        if (topic.may.browse) {
          drawBrowser(browser, name);
          drawScheduled(scheduled, name, topic.may.manage);
        } else {
          browser.replaceChildren(h('p', { class: 'muted' }, 'Messages need the browse grant.'));
        }
      }
    },
  };
}

function drawBrowser(section, topic) {
  const q = h('input', { type: 'search', placeholder: 'Payload or attribute text', 'aria-label': 'Search text' });
  const attribute = h('input', { placeholder: 'key or key=value', 'aria-label': 'Attribute' });
  const id = h('input', { placeholder: 'Message id', 'aria-label': 'Message id' });
  const body = h('tbody', {});
  const status = h('span', { class: 'muted' });
  let before = null; const stack = [];
  async function load(query) {
    const params = new URLSearchParams({ limit: '50', ...query });
    const result = await api(`${topicPath(topic)}/messages?${params}`);
    body.replaceChildren(...result.messages.map((m) => messageRow(m)));
    if (!result.messages.length) body.replaceChildren(h('tr', {}, h('td', { colspan: 4, class: 'muted' }, 'No messages here.')));
    before = result.next_before;
    status.textContent = `${result.messages.length} shown`;
  }
  const search = () => { stack.length = 0; load({ q: q.value, attribute: attribute.value }).catch((e) => notice(e.message, true)); };
  section.replaceChildren(
    h('h2', {}, 'Messages'),
    h('p', { class: 'muted' }, 'Newest first; looking does not consume them.'),
    h('div', { class: 'toolbar' }, q, attribute, h('button', { type: 'button', onclick: search }, 'Search'),
      id, h('button', { type: 'button', onclick: () => load({ id: id.value }).catch((e) => notice(e.message, true)) }, 'Find'),
      h('button', { type: 'button', onclick: () => { if (before) { stack.push(before); load({ before, q: q.value, attribute: attribute.value }); } } }, 'Older'),
      status),
    table([{ label: 'Message id' }, { label: 'Published' }, { label: 'Attributes' }, { label: 'Payload' }], body));
  search();
}

function drawScheduled(section, topic, manage) {
  const body = h('tbody', {});
  async function load() {
    const { scheduled } = await api(`${topicPath(topic)}/scheduled?limit=100`);
    body.replaceChildren(...scheduled.map((m) => messageRow(m, manage ? h('button', {
      type: 'button', class: 'danger',
      onclick: async () => {
        if (!await confirmAction(`Cancel scheduled message ${m.message_id}?`)) return;
        try {
          const r = await post(`${topicPath(topic)}/scheduled/${enc(m.message_id)}/cancel`);
          notice(r.cancelled ? 'Cancelled.' : 'Not cancelled: it was already delivered or cancelled.');
        } catch (e) { notice(e.message, true); }
        load();
      },
    }, 'Cancel…') : null)));
    if (!scheduled.length) body.replaceChildren(h('tr', {}, h('td', { colspan: 5, class: 'muted' }, 'Nothing scheduled.')));
  }
  section.replaceChildren(h('h2', {}, 'Scheduled messages'),
    h('div', { class: 'toolbar' }, h('button', { type: 'button', onclick: () => load() }, 'Reload')),
    table([{ label: 'Message id' }, { label: 'Due' }, { label: 'Attributes' }, { label: 'Payload' }].concat(manage ? [{ label: '' }] : []), body));
  load().catch((e) => notice(e.message, true));
}

// ---- A subscription ----
// A line chart of `points` ([t, v]) as inline SVG: no library, nothing inline to run.
function chart(title, points, format) {
  const ns = 'http://www.w3.org/2000/svg';
  const svg = document.createElementNS(ns, 'svg');
  svg.setAttribute('viewBox', '0 0 300 90');
  svg.setAttribute('preserveAspectRatio', 'none');
  const axis = document.createElementNS(ns, 'line');
  Object.entries({ x1: 0, y1: 80, x2: 300, y2: 80, class: 'axis' }).forEach(([k, v]) => axis.setAttribute(k, v));
  svg.append(axis);
  const values = points.map((p) => p[1]);
  const max = Math.max(1, ...values);
  if (points.length > 1) {
    const t0 = points[0][0]; const span = Math.max(1, points[points.length - 1][0] - t0);
    const line = document.createElementNS(ns, 'polyline');
    line.setAttribute('points', points.map(([t, v]) => `${((t - t0) / span) * 300},${80 - (v / max) * 72}`).join(' '));
    svg.append(line);
  }
  const label = document.createElementNS(ns, 'text');
  label.setAttribute('x', 2); label.setAttribute('y', 10);
  label.textContent = `max ${format(max)}`;
  svg.append(label);
  const last = values.length ? format(values[values.length - 1]) : '—';
  return h('div', { class: 'chart' }, h('div', {}, h('strong', {}, title), ' ', h('span', { class: 'muted' }, `now ${last}`)), svg);
}

function subscriptionPage(topic, name) {
  const s = (id) => `sub-${id}`;
  const consumers = h('tbody', {});
  const charts = h('div', { class: 'charts', id: 'charts' });
  const controls = h('section', { id: 'seek' });
  const dead = h('section', { id: 'dead-letters' });
  main.replaceChildren(
    h('p', {}, h('a', { href: `#/${topicPath(topic)}` }, topic)),
    h('h1', {}, 'Subscription ', h('span', { id: 'subscription-name' }, name)),
    h('div', { class: 'cards' }, card('Lag', s('lag')), card('Pending', s('pending')), card('Oldest unacked', s('oldest')),
      card('Dead letters', s('dead-letters')), card('Acked', s('acked')), card('Ack rate', s('ack-rate'))),
    h('h2', {}, 'Consumers'),
    table([{ label: 'Consumer' }, { label: 'Pending', num: true }, { label: 'Idle', num: true }], consumers),
    h('h2', {}, 'Last hour'), charts, controls, dead);
  let drawn = false; let lastDead = null;
  let reloadDead = () => {};
  return {
    async refresh() {
      const sub = await api(subPath(topic, name));
      set(s('lag'), count(sub.lag));
      set(s('pending'), count(sub.pending));
      set(s('oldest'), age(sub.oldest_unacked_age_ms));
      set(s('dead-letters'), count(sub.dead_letters));
      set(s('acked'), count(sub.acked));
      const ackRate = rate(`acked:${topic}/${name}`, sub.acked);
      set(s('ack-rate'), perSecond(ackRate));
      consumers.replaceChildren(...sub.consumers.map((c) => h('tr', {}, h('td', {}, c.name),
        h('td', { class: 'num' }, count(c.pending)), h('td', { class: 'num' }, age(c.idle_ms)))));
      if (!sub.consumers.length) consumers.replaceChildren(h('tr', {}, h('td', { colspan: 3, class: 'muted' }, 'No consumers.')));
      const { points } = await api(`${subPath(topic, name)}/history`);
      // Rates from each point to the next; counters that went back (a
      // re-created subscription) count as no change.
      const rates = (key) => points.slice(1).map((p, i) => [p.time_ms,
        Math.max(0, p[key] - points[i][key]) * 1000 / Math.max(1, p.time_ms - points[i].time_ms)]);
      const series = (key) => points.map((p) => [p.time_ms, p[key]]);
      const perS = (v) => `${v.toFixed(1)}/s`;
      charts.replaceChildren(
        chart('Publish rate', rates('published'), perS), chart('Ack rate', rates('acked'), perS),
        chart('Lag', series('lag'), count), chart('Pending', series('pending'), count),
        chart('Oldest unacked age', series('oldest_unacked_age_ms'), age));
      if (!points.length) charts.append(h('p', { class: 'muted' }, 'A point is added every 10 s.'));
      if (!drawn) {
        drawn = true;
        if (sub.may.manage) drawSeek(controls, topic, name);
        if (sub.may.browse) reloadDead = drawDeadLetters(dead, topic, name, sub.may.manage);
        else dead.replaceChildren(h('h2', {}, 'Dead letters'), h('p', { class: 'muted' }, 'Dead letters need the browse grant.'));
      } else if (lastDead !== sub.dead_letters) reloadDead();
      lastDead = sub.dead_letters;
    },
  };
}

function drawSeek(section, topic, name) {
  const at = h('input', { type: 'datetime-local', step: '1', 'aria-label': 'Seek time' });
  section.replaceChildren(h('h2', {}, 'Seek'),
    h('p', { class: 'muted' }, 'Messages published from this time on are delivered (again); earlier ones count as acked.'),
    h('div', { class: 'toolbar' }, at, h('button', {
      type: 'button', class: 'danger',
      onclick: async () => {
        if (!at.value) { notice('Pick a time first.', true); return; }
        const iso = new Date(at.value).toISOString();
        if (!await confirmAction(`Seek ${name} to ${iso}?`)) return;
        try { await post(`${subPath(topic, name)}/seek`, { time: iso }); notice(`Sought to ${iso}.`); } catch (e) { notice(e.message, true); }
      },
    }, 'Seek…')));
}

function drawDeadLetters(section, topic, name, manage) {
  const body = h('tbody', {});
  const selected = new Set();
  let page = null; const tokens = [];
  async function load(token) {
    const params = new URLSearchParams({ limit: '50' });
    if (token) params.set('page_token', token);
    const result = await api(`${subPath(topic, name)}/dead-letters?${params}`);
    page = result.next_page_token;
    body.replaceChildren(...result.dead_letters.map((d) => {
      const box = manage ? h('input', { type: 'checkbox', 'aria-label': `Select ${d.id}`, checked: selected.has(d.id),
        onchange: (e) => { if (e.target.checked) selected.add(d.id); else selected.delete(d.id); } }) : null;
      return h('tr', {}, manage ? h('td', {}, box) : null,
        h('td', {}, h('code', {}, d.id)), h('td', {}, h('code', {}, d.message_id)), h('td', {}, d.reason),
        h('td', { class: 'num' }, count(d.attempts)), h('td', {}, time(d.dead_lettered_ms)),
        h('td', {}, h('pre', { class: 'payload' }, d.payload ?? ''),
          h('span', { class: 'muted' }, `${d.payload_format} · ${count(d.payload_bytes)} bytes`)));
    }));
    if (!result.dead_letters.length) body.replaceChildren(h('tr', {}, h('td', { colspan: 7, class: 'muted' }, 'No dead letters.')));
  }
  const reload = () => load(tokens[tokens.length - 1]).catch((e) => notice(e.message, true));
  async function act(verb, typed) {
    const ids = [...selected];
    const what = ids.length ? `${ids.length} selected dead letters` : `all dead letters of ${name}`;
    if (!await confirmAction(`${verb} ${what}?`, typed ? name : null)) return;
    try {
      const r = await post(`${subPath(topic, name)}/dead-letters/${verb.toLowerCase()}`, { dead_letter_ids: ids });
      notice(verb === 'Redrive' ? `Redriven: ${r.redriven}` : `Purged: ${r.purged}`);
      selected.clear();
    } catch (e) { notice(e.message, true); }
    tokens.length = 0;
    reload();
  }
  section.replaceChildren(h('h2', {}, 'Dead letters'),
    h('div', { class: 'toolbar' },
      manage ? h('button', { type: 'button', class: 'danger', onclick: () => act('Redrive', false) }, 'Redrive…') : null,
      manage ? h('button', { type: 'button', class: 'danger', onclick: () => act('Purge', true) }, 'Purge…') : null,
      h('button', { type: 'button', onclick: () => { tokens.length = 0; reload(); } }, 'First page'),
      h('button', { type: 'button', onclick: () => { if (page) { tokens.push(page); reload(); } } }, 'Next page')),
    h('p', { class: 'muted' }, manage ? 'With none selected, Redrive… and Purge… act on all of them.' : ''),
    table((manage ? [{ label: '' }] : []).concat([{ label: 'Dead letter id' }, { label: 'Message id' }, { label: 'Reason' },
      { label: 'Attempts', num: true }, { label: 'Dead-lettered' }, { label: 'Payload' }]), body));
  reload();
  return reload;
}

// ---- Routing and polling ----
function route() {
  const parts = window.location.hash.replace(/^#\/?/, '').split('/').filter(Boolean).map(decodeURIComponent);
  document.getElementById('nav-overview').classList.toggle('active', parts.length === 0);
  document.getElementById('nav-topics').classList.toggle('active', parts[0] === 'topics');
  if (parts[0] === 'topics' && parts.length === 1) return topicsPage();
  if (parts[0] === 'topics' && parts.length === 2) return topicPage(parts[1]);
  if (parts[0] === 'topics' && parts.length === 4 && parts[2] === 'subscriptions') return subscriptionPage(parts[1], parts[3]);
  return overviewPage();
}

async function tick() {
  const current = page;
  try {
    await current.refresh();
  } catch (e) {
    if (current === page && e.status !== 401) {
      main.replaceChildren(h('h1', {}, e.status === 403 ? 'Not allowed' : e.status === 404 ? 'Not found' : 'Error'),
        h('p', { class: 'error' }, e.message));
      page = { refresh: async () => {} };
    }
  }
}

function show() {
  clearInterval(timer);
  page = route();
  tick();
  timer = setInterval(tick, POLL_MS);
}

async function start() {
  const overview = await api('overview');
  document.getElementById('mode').hidden = !overview.read_only;
  document.getElementById('who').textContent = overview.login ? `as ${overview.caller}` : '';
  document.getElementById('logout').hidden = !overview.login;
  window.addEventListener('hashchange', show);
  show();
}

start().catch((e) => { main.replaceChildren(h('p', { class: 'error' }, e.message)); });
