// Pattern console: a small single-page client of the /v1 API.
//
// Rules this file keeps: the API key lives in sessionStorage only (this tab) and travels only
// as `Authorization: Bearer` to this origin; every piece of data is put on the page as text
// (textContent, text nodes, attribute values of our own making), never parsed as markup; every
// action is a real button, link or labelled form control.
'use strict';

(() => {
  const KEY = 'pattern.key';
  const TURN = 'pattern.turn.';
  const main = document.getElementById('main');
  const nav = document.getElementById('nav');
  const notice = document.getElementById('notice');
  let live = new AbortController();
  let agentNames = new Map();

  // ---- DOM helpers: data only ever becomes text -------------------------------------------

  function h(tag, props, ...children) {
    const node = document.createElement(tag);
    for (const [k, v] of Object.entries(props || {})) {
      if (v === undefined || v === null || v === false) continue;
      if (k === 'text') node.textContent = String(v);
      else if (k.startsWith('on')) node.addEventListener(k.slice(2), v);
      else if (k === 'class') node.className = v;
      else if (k === 'value') node.value = v;
      else node.setAttribute(k, v === true ? '' : String(v));
    }
    for (const c of children.flat()) {
      if (c === null || c === undefined || c === false) continue;
      node.append(c instanceof Node ? c : document.createTextNode(String(c)));
    }
    return node;
  }

  let fieldCount = 0;
  // A labelled control: `<label>text <control id=...></label>`.
  function field(text, control) {
    control.id = control.id || 'f' + (++fieldCount);
    return h('label', { for: control.id }, text, control);
  }

  function link(href, text, props) {
    return h('a', Object.assign({ href }, props || {}), text);
  }

  function errorBox(err, prefix) {
    const text = describe(err);
    return h('div', { class: 'error', role: 'alert' }, prefix ? prefix + ': ' + text : text);
  }

  function describe(err) {
    if (err instanceof ApiError) {
      if (err.status === 404) return 'Not found: ' + err.message;
      if (err.status === 409) return 'Conflict: ' + err.message;
      return err.message + ' (' + err.code + ')';
    }
    return 'Could not reach the server: ' + (err && err.message ? err.message : String(err));
  }

  function when(ts) {
    if (!ts) return '';
    const d = new Date(ts);
    return isNaN(d) ? String(ts) : d.toLocaleString();
  }

  function enc(s) { return encodeURIComponent(s); }

  // ---- the API ----------------------------------------------------------------------------

  class ApiError extends Error {
    constructor(status, code, message, details) {
      super(message);
      this.status = status;
      this.code = code;
      this.details = details;
    }
  }

  function headers(extra) {
    return Object.assign({ Authorization: 'Bearer ' + (sessionStorage.getItem(KEY) || '') }, extra || {});
  }

  async function failure(res) {
    let body = null;
    try { body = await res.json(); } catch (_) { body = null; }
    const e = (body && body.error) || {};
    const err = new ApiError(res.status, e.code || 'http_' + res.status, e.message || res.statusText, e.details);
    if (res.status === 401) loggedOut(err);
    return err;
  }

  async function api(method, path, body) {
    const init = { method, headers: headers(), signal: live.signal };
    if (body !== undefined) {
      init.headers['Content-Type'] = 'application/json';
      init.body = JSON.stringify(body);
    }
    const res = await fetch(path, init);
    if (!res.ok) throw await failure(res);
    if (res.status === 204) return null;
    return res.json();
  }

  // Opens a server-sent event stream (POST with a body, or GET) and calls `onEvent` for each
  // event; resolves when the stream ends. Returns the response's headers through `onOpen`.
  async function stream(method, path, body, extraHeaders, onOpen, onEvent) {
    const init = {
      method,
      headers: headers(Object.assign({ Accept: 'text/event-stream' }, extraHeaders || {})),
      signal: live.signal,
    };
    if (body !== undefined) {
      init.headers['Content-Type'] = 'application/json';
      init.body = JSON.stringify(body);
    }
    const res = await fetch(path, init);
    if (!res.ok) throw await failure(res);
    if (onOpen) onOpen(res.headers);
    const reader = res.body.getReader();
    const decoder = new TextDecoder();
    let buffer = '';
    for (;;) {
      const { value, done } = await reader.read();
      if (done) break;
      buffer += decoder.decode(value, { stream: true }).replace(/\r\n?/g, '\n');
      let cut;
      while ((cut = buffer.indexOf('\n\n')) >= 0) {
        const raw = buffer.slice(0, cut);
        buffer = buffer.slice(cut + 2);
        const event = parseEvent(raw);
        if (event) onEvent(event);
      }
    }
  }

  function parseEvent(raw) {
    let id = null;
    let event = 'message';
    const data = [];
    for (const line of raw.split('\n')) {
      if (!line || line.startsWith(':')) continue;
      const colon = line.indexOf(':');
      const name = colon < 0 ? line : line.slice(0, colon);
      let value = colon < 0 ? '' : line.slice(colon + 1);
      if (value.startsWith(' ')) value = value.slice(1);
      if (name === 'id') id = value;
      else if (name === 'event') event = value;
      else if (name === 'data') data.push(value);
    }
    if (!data.length) return null;
    let parsed = null;
    try { parsed = JSON.parse(data.join('\n')); } catch (_) { parsed = { text: data.join('\n') }; }
    return { id, event, data: parsed };
  }

  async function loadAgentNames() {
    const agents = await api('GET', '/v1/agents');
    agentNames = new Map(agents.map((a) => [a.id, a.name]));
    return agents;
  }

  function nameOf(id) { return agentNames.get(id) || id; }

  // ---- session ----------------------------------------------------------------------------

  let loginMessage = null;

  function loggedOut(err) {
    sessionStorage.removeItem(KEY);
    loginMessage = err ? 'The server refused the key: ' + err.message : null;
    if (location.hash !== '#/login') location.hash = '#/login';
    else route();
  }

  document.getElementById('logout').addEventListener('click', () => {
    for (const k of Object.keys(sessionStorage)) sessionStorage.removeItem(k);
    loginMessage = 'Logged out. The key is forgotten.';
    location.hash = '#/login';
  });

  function page(title, ...children) {
    const section = h('section', {}, h('h1', { text: title }), ...children);
    main.replaceChildren(section);
    document.title = title + ' · Pattern console';
    return section;
  }

  function renderLogin() {
    nav.hidden = true;
    const input = h('input', { type: 'password', name: 'key', autocomplete: 'off', required: true, spellcheck: 'false' });
    const out = h('div', { id: 'login-result' });
    const form = h('form', { id: 'login' },
      field('Organization API key', input),
      h('p', { class: 'muted', text: 'Kept in this browser tab only (sessionStorage); sent only to this server.' }),
      h('button', { type: 'submit', text: 'Log in' }), out);
    form.addEventListener('submit', async (ev) => {
      ev.preventDefault();
      out.replaceChildren();
      const key = input.value.trim();
      try {
        const res = await fetch('/v1/agents', { headers: { Authorization: 'Bearer ' + key } });
        if (!res.ok) {
          let body = null;
          try { body = await res.json(); } catch (_) { body = null; }
          const msg = body && body.error ? body.error.message : res.statusText;
          out.replaceChildren(h('div', { class: 'error', role: 'alert' }, 'Login failed: ' + msg));
          return;
        }
        sessionStorage.setItem(KEY, key);
        loginMessage = null;
        location.hash = '#/agents';
      } catch (err) {
        out.replaceChildren(errorBox(err));
      }
    });
    const section = page('Log in', loginMessage ? h('p', { class: 'error', role: 'alert', text: loginMessage }) : null, form);
    loginMessage = null;
    input.focus();
    return section;
  }

  // ---- agents -----------------------------------------------------------------------------

  function modelText(agent) {
    const m = agent.metadata && agent.metadata.model;
    if (!m) return 'server default';
    return m.provider + ' / ' + m.model + (m.base_url ? ' (' + m.base_url + ')' : '');
  }

  async function renderAgents() {
    const list = h('div', {}, h('p', { class: 'muted', text: 'Loading…' }));
    const section = page('Agents', list, h('h2', { text: 'Create an agent' }), createAgentForm());
    try {
      const agents = await loadAgentNames();
      if (!agents.length) {
        list.replaceChildren(h('p', { text: 'No agents yet.' }));
        return section;
      }
      const rows = agents.map((a) => h('tr', {},
        h('td', {}, link('#/agents/' + enc(a.id), a.name, { class: 'agent-name' })),
        h('td', { class: 'mono', text: modelText(a) }),
        h('td', { text: when(a.created_at) }),
        h('td', {}, agentLinks(a.id))));
      list.replaceChildren(h('table', { id: 'agents' },
        h('thead', {}, h('tr', {}, ['Name', 'Model', 'Created', 'Pages'].map((t) => h('th', { scope: 'col', text: t })))),
        h('tbody', {}, rows)));
    } catch (err) {
      list.replaceChildren(errorBox(err));
    }
    return section;
  }

  function agentLinks(id) {
    const base = '#/agents/' + enc(id);
    return h('span', { class: 'subnav-inline' },
      [['Chat', ''], ['Batches', '/batches'], ['Memory', '/memory'], ['Archival', '/archival'], ['Context', '/context'],
        ['Schedules', '/schedules'], ['MCP servers', '/mcp']]
        .flatMap(([t, p], i) => [i ? ' · ' : '', link(base + p, t)]));
  }

  // Provider, model and base URL fields; `value()` is the API's model object, or null for the
  // server's default.
  function modelFields(current) {
    const provider = h('select', { name: 'provider' },
      [['', 'Server default'], ['openai', 'OpenAI'], ['anthropic', 'Anthropic'], ['gemini', 'Gemini'],
        ['local', 'Local (llama.cpp)'], ['openai_compatible', 'OpenAI-compatible']]
        .map(([v, t]) => h('option', { value: v, text: t })));
    const model = h('input', { name: 'model', placeholder: 'model name' });
    const baseUrl = h('input', { name: 'base_url', placeholder: 'base URL (OpenAI-compatible only)' });
    if (current) {
      provider.value = current.provider || '';
      model.value = current.model || '';
      baseUrl.value = current.base_url || '';
    }
    return {
      nodes: [field('Provider', provider), field('Model', model), field('Base URL', baseUrl)],
      value() {
        if (!provider.value) return null;
        const m = { provider: provider.value, model: model.value };
        if (baseUrl.value.trim()) m.base_url = baseUrl.value.trim();
        return m;
      },
    };
  }

  function setModelForm(agent, shown) {
    const fields = modelFields(agent.metadata && agent.metadata.model);
    const out = h('div', {});
    const form = h('form', { id: 'set-model' }, fields.nodes, h('button', { type: 'submit', text: 'Set model' }), out);
    form.addEventListener('submit', async (ev) => {
      ev.preventDefault();
      out.replaceChildren();
      try {
        const next = await api('PUT', '/v1/agents/' + enc(agent.id) + '/model', { model: fields.value() });
        shown.textContent = modelText(next);
        out.replaceChildren(h('p', { role: 'status', class: 'ok', text: 'The next turn runs on ' + modelText(next) + '.' }));
      } catch (err) {
        out.replaceChildren(errorBox(err, 'Not changed'));
      }
    });
    return h('details', { class: 'model' }, h('summary', { text: 'Change model' }), form);
  }

  function createAgentForm() {
    const name = h('input', { name: 'name', required: true, maxlength: 200 });
    const instructions = h('textarea', { name: 'instructions', rows: 3 });
    const fields = modelFields(null);
    const out = h('div', {});
    const form = h('form', { id: 'create-agent' },
      field('Name', name), field('Instructions', instructions), fields.nodes,
      h('button', { type: 'submit', text: 'Create agent' }), out);
    form.addEventListener('submit', async (ev) => {
      ev.preventDefault();
      out.replaceChildren();
      const body = { name: name.value };
      if (instructions.value.trim()) body.instructions = instructions.value;
      const model = fields.value();
      if (model) body.model = model;
      try {
        const agent = await api('POST', '/v1/agents', body);
        location.hash = '#/agents/' + enc(agent.id);
      } catch (err) {
        out.replaceChildren(errorBox(err, 'Not created'));
      }
    });
    return form;
  }

  // The agent's page header and sub-navigation; throws (404 shown) when the agent is not ours.
  async function agentPage(id, what, current) {
    const signal = live.signal;
    const agent = await api('GET', '/v1/agents/' + enc(id));
    stillHere(signal);
    agentNames.set(agent.id, agent.name);
    const base = '#/agents/' + enc(id);
    const sub = h('nav', { class: 'subnav', 'aria-label': 'Agent' },
      [['Chat', ''], ['Batches', '/batches'], ['Memory', '/memory'], ['Archival & search', '/archival'], ['Context', '/context']]
        .map(([t, p]) => link(base + p, t, p === current ? { 'aria-current': 'page' } : {})));
    const shown = h('span', { id: 'agent-model', text: modelText(agent) });
    const section = page(what + ': ' + agent.name, sub,
      h('p', { class: 'muted' }, 'Model: ', shown, ' · id ', h('span', { class: 'mono', text: agent.id })),
      setModelForm(agent, shown));
    return { agent, section };
  }

  // Throws an AbortError when the user went to another page meanwhile, so that a late answer
  // never replaces the page they are on.
  function stillHere(signal) {
    if (signal.aborted) throw new DOMException('left the page', 'AbortError');
  }

  function notFound(err) {
    if (err && err.name === 'AbortError') return;
    page(err instanceof ApiError && err.status === 404 ? 'Not found' : 'Error', errorBox(err));
  }

  // ---- chat -------------------------------------------------------------------------------

  function renderBlocks(list, message) {
    for (const block of message.content || []) {
      if (block.type === 'text' && block.text) {
        list.append(h('li', { class: message.role }, h('span', { class: 'who', text: message.role + ':' }), block.text));
      } else if (block.type === 'tool_use') {
        list.append(h('li', { class: 'tool' }, 'call ' + block.name + '(' + JSON.stringify(block.input) + ')'));
      } else if (block.type === 'tool_result') {
        list.append(h('li', { class: 'tool' + (block.is_error ? ' failed' : '') },
          (block.is_error ? 'error: ' : 'result: ') + block.content));
      } else if (block.type === 'thinking' && block.text) {
        list.append(h('li', { class: 'muted' }, '(thinking) ' + block.text));
      }
    }
  }

  async function renderChat(id) {
    let ctx;
    try { ctx = await agentPage(id, 'Chat', ''); } catch (err) { return notFound(err); }
    const history = h('ol', { class: 'transcript', id: 'history', 'aria-label': 'History' });
    const turnList = h('ol', { class: 'transcript', id: 'turn', 'aria-label': 'Current turn' });
    const status = h('p', { id: 'turn-status', role: 'status', class: 'muted' });
    const text = h('textarea', { name: 'message', rows: 3, required: true });
    const send = h('button', { type: 'submit', text: 'Send' });
    const form = h('form', { id: 'chat' }, field('Message', text), send);
    ctx.section.append(h('h2', { text: 'History' }), history, turnList, status, form);

    const stored = JSON.parse(sessionStorage.getItem(TURN + id) || 'null');
    const openBatch = stored && stored.events.find((e) => e.event === 'received');
    try {
      const batches = await api('GET', '/v1/agents/' + enc(id) + '/batches?limit=20');
      for (const b of batches.reverse()) {
        if (openBatch && b.id === openBatch.data.batch_id) continue;
        const detail = await api('GET', '/v1/agents/' + enc(id) + '/batches/' + enc(b.id));
        for (const m of detail.messages) renderBlocks(history, m);
        if (b.state === 'abandoned') history.append(h('li', { class: 'failed' }, 'batch ' + b.id + ' was abandoned' + (b.retried_at ? ' (retried)' : '')));
      }
      if (!history.children.length) history.append(h('li', { class: 'muted', text: 'No messages yet.' }));
    } catch (err) {
      if (!(err && err.name === 'AbortError')) history.replaceChildren(errorBox(err));
    }

    const turn = new TurnView(id, turnList, status, send);
    if (stored) turn.resume(stored);
    form.addEventListener('submit', (ev) => {
      ev.preventDefault();
      if (!text.value.trim()) return;
      const content = text.value;
      text.value = '';
      turn.start(content);
    });
  }

  // One turn on the page: its events rendered as they come, kept in sessionStorage with the
  // last event id so a reload replays what was shown and resumes the stream after it.
  class TurnView {
    constructor(agent, list, status, button) {
      this.agent = agent;
      this.list = list;
      this.status = status;
      this.button = button;
      this.record = null;
    }

    save() { sessionStorage.setItem(TURN + this.agent, JSON.stringify(this.record)); }

    begin(record) {
      this.record = record;
      this.list.replaceChildren();
      this.text = null;
      this.calls = new Map();
      this.list.append(h('li', { class: 'user' }, h('span', { class: 'who', text: 'user:' }), record.content));
      this.button.disabled = true;
      this.status.textContent = 'Streaming the answer…';
    }

    async start(content) {
      this.begin({ turn: null, cursor: 0, content, events: [] });
      const path = '/v1/agents/' + enc(this.agent) + '/messages';
      await this.follow(() => stream('POST', path, { content, stream: true }, {},
        (hdrs) => { this.record.turn = hdrs.get('x-pattern-turn-id'); this.save(); },
        (ev) => this.onEvent(ev)));
    }

    async resume(record) {
      this.begin(record);
      for (const ev of record.events) this.show(ev);
      this.status.textContent = 'Resuming the answer after event ' + record.cursor + '…';
      if (!record.turn) return this.finish('The turn could not be resumed (its id never arrived).');
      const path = '/v1/agents/' + enc(this.agent) + '/turns/' + enc(record.turn) + '/events?after=' + record.cursor;
      await this.follow(() => stream('GET', path, undefined, { 'Last-Event-ID': String(record.cursor) }, null,
        (ev) => this.onEvent(ev)));
    }

    async follow(open) {
      try {
        await open();
        if (this.record) this.interrupted('The connection ended before the turn did.');
      } catch (err) {
        if (err && err.name === 'AbortError') return; // left the page; the turn goes on
        if (err instanceof ApiError || !this.record || !this.record.turn) {
          this.list.append(h('li', { class: 'failed' }, describe(err)));
          this.finish('The turn failed.');
        } else {
          this.interrupted(describe(err));
        }
      }
    }

    // The stream broke but the turn goes on at the server: keep it and offer to resume.
    interrupted(why) {
      const record = this.record;
      const again = h('button', { type: 'button', class: 'secondary', text: 'Resume' });
      again.addEventListener('click', () => this.resume(record));
      this.status.replaceChildren(why + ' The turn goes on at the server. ', again);
    }

    onEvent(ev) {
      if (!this.record) return;
      const n = Number(ev.id);
      if (n && n <= this.record.cursor) return;
      if (n) this.record.cursor = n;
      this.record.events.push({ event: ev.event, data: ev.data });
      this.save();
      this.show(ev);
      if (ev.event === 'done') this.finish('Turn finished (' + ev.data.reason + ').');
      if (ev.event === 'error') this.finish('The turn failed.');
    }

    finish(message) {
      sessionStorage.removeItem(TURN + this.agent);
      this.record = null;
      this.button.disabled = false;
      this.status.replaceChildren(message);
    }

    show(ev) {
      const d = ev.data || {};
      switch (ev.event) {
        case 'queued':
          this.list.append(h('li', { class: 'muted' }, 'Queued: the agent is busy; the message waits in its queue.'));
          break;
        case 'text_delta':
          if (!this.text) {
            this.text = h('span', { class: 'answer' });
            this.list.append(h('li', { class: 'assistant' }, h('span', { class: 'who', text: 'assistant:' }), this.text));
          }
          this.text.append(d.text || '');
          break;
        case 'thinking_delta':
          this.list.append(h('li', { class: 'muted' }, '(thinking) ' + (d.text || '')));
          break;
        case 'tool_call_started': {
          this.text = null;
          const li = h('li', { class: 'tool', 'data-call': d.call_id }, 'calling ' + d.name + '…');
          this.calls.set(d.call_id, { li, name: d.name });
          this.list.append(li);
          break;
        }
        case 'tool_call_finished': {
          const call = this.calls.get(d.call_id);
          const line = 'call ' + d.name + '(' + JSON.stringify(d.input) + ')';
          if (call) call.li.textContent = line;
          else this.list.append(h('li', { class: 'tool' }, line));
          break;
        }
        case 'tool_result': {
          const call = this.calls.get(d.call_id);
          this.list.append(h('li', { class: 'tool' + (d.is_error ? ' failed' : '') },
            (d.is_error ? 'error from ' : 'result of ') + (call ? call.name : d.call_id) + ': ' + d.content));
          this.text = null;
          break;
        }
        case 'approval_requested':
          this.list.append(approvalItem(d));
          break;
        case 'error': {
          const e = d.error || {};
          const li = h('li', { class: 'failed' }, 'Error (' + (e.code || 'unknown') + '): ' + (e.message || ''));
          const det = e.details || {};
          if (det.message_saved) {
            li.append(' — your message is saved; ',
              link('#/agents/' + enc(this.agent) + '/batches', 'retry batch ' + det.batch_id + ' on the Batches page'));
          }
          this.list.append(li);
          break;
        }
        default:
          break;
      }
    }
  }

  // A tool call waiting for a human: approve or deny it (`POST /v1/approvals/{id}`); whoever
  // answers first wins, and the answer shows what the server decided.
  function approvalItem(d) {
    const out = h('span', { class: 'approval-result' });
    const approve = h('button', { type: 'button', text: 'Approve' });
    const deny = h('button', { type: 'button', class: 'secondary', text: 'Deny' });
    const decide = async (decision) => {
      approve.disabled = true;
      deny.disabled = true;
      try {
        const a = await api('POST', '/v1/approvals/' + enc(d.approval_id), { decision });
        out.textContent = ' ' + a.state + '.';
      } catch (err) {
        out.replaceChildren(' ', errorBox(err));
      }
    };
    approve.addEventListener('click', () => decide('approve'));
    deny.addEventListener('click', () => decide('deny'));
    return h('li', { class: 'tool approval', 'data-approval': d.approval_id },
      'waiting for approval of ' + d.tool + ': ' + d.reason + ' (until ' + when(d.deadline) + ') ',
      approve, ' ', deny, out);
  }

  // ---- batches ----------------------------------------------------------------------------

  async function renderBatches(id, message) {
    let ctx;
    try { ctx = await agentPage(id, 'Batches', '/batches'); } catch (err) { return notFound(err); }
    const out = h('div', { id: 'batch-result' }, message || null);
    const body = h('tbody', {});
    ctx.section.append(out, h('table', { id: 'batches' },
      h('thead', {}, h('tr', {}, ['Batch', 'Type', 'State', 'Started', 'Duration', 'Messages', 'Details'].map((t) => h('th', { scope: 'col', text: t })))),
      body));
    try {
      const batches = await api('GET', '/v1/agents/' + enc(id) + '/batches?limit=100');
      if (!batches.length) body.append(h('tr', {}, h('td', { colspan: 7, text: 'No batches yet.' })));
      for (const b of batches) {
        const stateCell = h('td', {}, h('span', { class: 'state-' + b.state, text: b.state }));
        if (b.state === 'abandoned') {
          if (b.retried_at) stateCell.append(' (retried ' + when(b.retried_at) + ')');
          else {
            const retry = h('button', { type: 'button', class: 'secondary', text: 'Retry', 'aria-label': 'Retry batch ' + b.id });
            retry.addEventListener('click', async () => {
              const signal = live.signal;
              retry.disabled = true;
              out.replaceChildren(h('p', { role: 'status', text: 'Retrying batch ' + b.id + '…' }));
              try {
                const result = await api('POST', '/v1/agents/' + enc(id) + '/batches/' + enc(b.id) + '/retry');
                if (signal.aborted) return;
                await renderBatches(id, h('p', { role: 'status', class: 'ok' },
                  'Retried batch ' + b.id + ' as batch ' + result.batch_id + ': ' + result.text));
              } catch (err) {
                out.replaceChildren(errorBox(err, 'Retry failed'));
                retry.disabled = false;
              }
            });
            stateCell.append(' ', retry);
          }
        }
        const details = h('details', {}, h('summary', { text: 'messages and tool pairs' }));
        details.addEventListener('toggle', () => { if (details.open && details.children.length === 1) batchDetail(id, b.id, details); }, { once: false });
        body.append(h('tr', { 'data-batch': b.id, 'data-state': b.state },
          h('td', { class: 'mono', text: b.id }), h('td', { text: b.batch_type }), stateCell,
          h('td', { text: when(b.started_at) }),
          h('td', { text: b.duration_ms === null || b.duration_ms === undefined ? '—' : b.duration_ms + ' ms' }),
          h('td', { text: b.message_count }), h('td', {}, details)));
      }
    } catch (err) {
      out.replaceChildren(errorBox(err));
    }
  }

  async function batchDetail(agent, batch, into) {
    try {
      const d = await api('GET', '/v1/agents/' + enc(agent) + '/batches/' + enc(batch));
      const list = h('ol', { class: 'transcript' });
      for (const m of d.messages) renderBlocks(list, m);
      const pairs = h('ul', {}, d.tool_pairs.map((p) => h('li', { class: 'mono' },
        p.name + ' [' + p.tool_use_id + ']: call #' + p.call_sequence + ' → ' +
        (p.result_sequence === null ? 'no result' : 'result #' + p.result_sequence + (p.is_error ? ' (error)' : '')))));
      into.append(list, h('p', { text: 'Tool pairs: ' + d.tool_pairs.length + (d.pending_tool_calls.length ? ', waiting: ' + d.pending_tool_calls.join(', ') : '') }), pairs);
    } catch (err) {
      into.append(errorBox(err));
    }
  }

  // ---- memory -----------------------------------------------------------------------------

  // Line diff (longest common subsequence) of two texts: [{op: ' ' | '-' | '+', line}].
  function diffLines(a, b) {
    const x = a.split('\n');
    const y = b.split('\n');
    const m = x.length;
    const n = y.length;
    const table = Array.from({ length: m + 1 }, () => new Array(n + 1).fill(0));
    for (let i = m - 1; i >= 0; i--) {
      for (let j = n - 1; j >= 0; j--) {
        table[i][j] = x[i] === y[j] ? table[i + 1][j + 1] + 1 : Math.max(table[i + 1][j], table[i][j + 1]);
      }
    }
    const out = [];
    let i = 0;
    let j = 0;
    while (i < m && j < n) {
      if (x[i] === y[j]) { out.push({ op: ' ', line: x[i] }); i++; j++; }
      else if (table[i + 1][j] >= table[i][j + 1]) out.push({ op: '-', line: x[i++] });
      else out.push({ op: '+', line: y[j++] });
    }
    while (i < m) out.push({ op: '-', line: x[i++] });
    while (j < n) out.push({ op: '+', line: y[j++] });
    return out;
  }

  function diffView(before, after) {
    return h('pre', { class: 'diff' }, diffLines(before, after).map((d) => {
      if (d.op === '-') return h('del', {}, '- ' + d.line + '\n');
      if (d.op === '+') return h('ins', {}, '+ ' + d.line + '\n');
      return '  ' + d.line + '\n';
    }));
  }

  async function renderMemory(id) {
    let ctx;
    try { ctx = await agentPage(id, 'Memory', '/memory'); } catch (err) { return notFound(err); }
    const blocks = h('div', { id: 'blocks' });
    ctx.section.append(blocks, h('h2', { text: 'Create a block' }), createBlockForm(id));
    try {
      const list = await api('GET', '/v1/agents/' + enc(id) + '/blocks');
      if (!list.length) blocks.append(h('p', { text: 'No memory blocks.' }));
      for (const b of list) blocks.append(blockCard(id, b));
    } catch (err) {
      blocks.append(errorBox(err));
    }
  }

  function blockCard(agent, block) {
    const card = h('div', { class: 'card', 'data-label': block.label });
    const path = '/v1/agents/' + enc(agent) + '/blocks/' + enc(block.label);
    const fill = (b) => {
      const value = h('textarea', { name: 'value', rows: 4, value: b.value });
      const out = h('div', { class: 'block-result' });
      const save = h('button', { type: 'submit', text: 'Save' });
      const undo = h('button', { type: 'button', class: 'secondary', text: 'Undo last change' });
      const form = h('form', { class: 'block-edit' },
        field('Value of ' + b.label, value),
        h('p', { class: 'muted', text: 'Editing version ' + b.version + '; saving is refused if the block changed since.' }),
        h('div', {}, save, ' ', undo), out);
      const reload = async () => {
        try { card.replaceChildren(...fill(await api('GET', path)).childNodes); } catch (err) { out.replaceChildren(errorBox(err)); }
      };
      form.addEventListener('submit', async (ev) => {
        ev.preventDefault();
        out.replaceChildren();
        try {
          const next = await api('PUT', path, { value: value.value, expected_version: b.version });
          card.replaceChildren(...fill(next).childNodes);
          card.querySelector('.block-result').replaceChildren(h('p', { role: 'status', class: 'ok', text: 'Saved as version ' + next.version + '.' }));
        } catch (err) {
          if (err instanceof ApiError && err.status === 409) {
            const again = h('button', { type: 'button', class: 'secondary', text: 'Load the current version' });
            again.addEventListener('click', reload);
            out.replaceChildren(h('div', { class: 'error conflict', role: 'alert' },
              'Version conflict: this block changed since you loaded version ' + b.version + '. Your text was not saved. (' + err.message + ') ', again));
          } else if (err instanceof ApiError && err.status === 422) {
            out.replaceChildren(errorBox(err, 'Refused, nothing saved'));
          } else out.replaceChildren(errorBox(err, 'Not saved'));
        }
      });
      undo.addEventListener('click', async () => {
        out.replaceChildren();
        try {
          const next = await api('POST', path + '/undo', { expected_version: b.version });
          card.replaceChildren(...fill(next).childNodes);
          card.querySelector('.block-result').replaceChildren(h('p', { role: 'status', class: 'ok', text: 'Undone: now version ' + next.version + '.' }));
        } catch (err) {
          out.replaceChildren(errorBox(err, 'Undo failed'));
        }
      });
      const history = h('details', { class: 'history' }, h('summary', { text: 'History' }));
      history.addEventListener('toggle', async () => {
        if (!history.open || history.children.length > 1) return;
        try {
          const versions = await api('GET', path + '/history');
          const list = h('ol', { reversed: true });
          versions.forEach((v, i) => {
            const before = versions[i + 1] ? versions[i + 1].value : '';
            list.append(h('li', { 'data-version': v.version },
              h('p', {}, 'version ' + v.version + ' · ' + v.change + ' · ' + when(v.created_at) + ' · by ' + nameOf(v.changed_by)),
              diffView(before, v.value)));
          });
          history.append(list);
        } catch (err) {
          history.append(errorBox(err));
        }
      });
      return h('div', {},
        h('h2', { text: b.label }),
        b.description ? h('p', { text: b.description }) : null,
        h('p', {},
          h('meter', { min: 0, max: b.char_limit, value: b.chars, 'aria-label': 'characters used' }), ' ',
          h('span', { class: 'chars', text: b.chars + ' / ' + b.char_limit + ' characters' }),
          ' · ' + b.block_type + ' · ' + b.permission + ' · version ' + b.version),
        form, history);
    };
    card.append(...fill(block).childNodes);
    return card;
  }

  function createBlockForm(agent) {
    const label = h('input', { name: 'label', required: true, pattern: '[a-z0-9_-]{1,100}' });
    const description = h('input', { name: 'description' });
    const value = h('textarea', { name: 'value', rows: 3 });
    const limit = h('input', { name: 'char_limit', type: 'number', min: 1, value: '5000' });
    const out = h('div', {});
    const form = h('form', { id: 'create-block' }, field('Label', label), field('Description', description),
      field('Value', value), field('Character limit', limit), h('button', { type: 'submit', text: 'Create block' }), out);
    form.addEventListener('submit', async (ev) => {
      ev.preventDefault();
      const signal = live.signal;
      try {
        await api('POST', '/v1/agents/' + enc(agent) + '/blocks', {
          label: label.value, description: description.value, value: value.value, char_limit: Number(limit.value),
        });
        if (!signal.aborted) renderMemory(agent);
      } catch (err) {
        out.replaceChildren(errorBox(err, 'Not created'));
      }
    });
    return form;
  }

  // ---- archival and search ----------------------------------------------------------------

  async function renderArchival(id) {
    let ctx;
    try { ctx = await agentPage(id, 'Archival & search', '/archival'); } catch (err) { return notFound(err); }
    const query = h('input', { name: 'query', type: 'search', required: true });
    const mode = h('select', { name: 'mode' }, ['auto', 'fts', 'vector', 'hybrid'].map((m) => h('option', { value: m, text: m })));
    const limit = h('input', { name: 'limit', type: 'number', min: 1, max: 100, value: '10' });
    const results = h('div', { id: 'search-results' });
    const search = h('form', { id: 'search', class: 'inline' }, field('Search', query), field('Mode', mode), field('Limit', limit),
      h('button', { type: 'submit', text: 'Search' }));
    search.addEventListener('submit', async (ev) => {
      ev.preventDefault();
      results.replaceChildren(h('p', { class: 'muted', text: 'Searching…' }));
      try {
        const hits = await api('POST', '/v1/agents/' + enc(id) + '/search', { query: query.value, mode: mode.value, limit: Number(limit.value) });
        if (!hits.length) return results.replaceChildren(h('p', { role: 'status', text: 'No hits.' }));
        results.replaceChildren(h('table', {},
          h('thead', {}, h('tr', {}, ['Score', 'Kind', 'Text', 'Created'].map((t) => h('th', { scope: 'col', text: t })))),
          h('tbody', {}, hits.map((hit) => h('tr', {},
            h('td', { class: 'mono score', text: hit.score.toFixed(4) }), h('td', { text: hit.content_type }),
            h('td', { text: hit.text }), h('td', { text: when(hit.created_at) }))))));
      } catch (err) {
        results.replaceChildren(errorBox(err, 'Search failed'));
      }
    });
    const text = h('textarea', { name: 'text', rows: 3, required: true });
    const tags = h('input', { name: 'tags', placeholder: 'comma-separated' });
    const out = h('div', {});
    const insert = h('form', { id: 'insert-archival' }, field('New passage', text), field('Tags', tags),
      h('button', { type: 'submit', text: 'Store passage' }), out);
    insert.addEventListener('submit', async (ev) => {
      ev.preventDefault();
      const signal = live.signal;
      try {
        await api('POST', '/v1/agents/' + enc(id) + '/archival', {
          text: text.value, tags: tags.value.split(',').map((t) => t.trim()).filter(Boolean),
        });
        if (!signal.aborted) renderArchival(id);
      } catch (err) {
        out.replaceChildren(errorBox(err, 'Not stored'));
      }
    });
    const passages = h('div', { id: 'passages' });
    ctx.section.append(search, results, h('h2', { text: 'Passages' }), passages, h('h2', { text: 'Store a passage' }), insert);
    try {
      const list = await api('GET', '/v1/agents/' + enc(id) + '/archival?limit=100');
      if (!list.length) passages.append(h('p', { text: 'No passages.' }));
      else passages.append(h('ul', {}, list.map((p) => h('li', {}, p.content,
        p.tags.length ? h('span', { class: 'muted', text: ' [' + p.tags.join(', ') + ']' }) : null,
        h('span', { class: 'muted', text: ' · ' + when(p.created_at) })))));
    } catch (err) {
      passages.append(errorBox(err));
    }
  }

  // ---- context ----------------------------------------------------------------------------

  async function renderContext(id) {
    let ctx;
    try { ctx = await agentPage(id, 'Context', '/context'); } catch (err) { return notFound(err); }
    const out = h('div', { id: 'context' });
    ctx.section.append(out);
    try {
      const c = await api('GET', '/v1/agents/' + enc(id) + '/context');
      const total = c.sections.reduce((s, x) => s + x.tokens, 0);
      out.append(h('p', {}, 'Model ', h('span', { class: 'mono', text: c.model }), ': window ' + c.window +
        ' tokens, ' + c.response_reserve + ' kept for the answer; this request takes ' + total + ' tokens (' +
        (100 * total / Math.max(1, c.window)).toFixed(1) + '% of the window).'));
      if (c.would_compress) out.append(h('p', { class: 'error', text: 'The history is over its budget: the next turn compresses it first.' }));
      out.append(h('table', { id: 'sections' },
        h('thead', {}, h('tr', {}, ['Section', 'Tokens', 'Share of window'].map((t) => h('th', { scope: 'col', text: t })))),
        h('tbody', {}, c.sections.map((s) => h('tr', {},
          h('td', { text: s.name }), h('td', { class: 'mono', text: s.tokens }),
          h('td', {}, h('meter', { min: 0, max: c.window, value: s.tokens, 'aria-label': s.name + ' share of the window' }), ' ' +
            (100 * s.tokens / Math.max(1, c.window)).toFixed(2) + '%'))))));
      out.append(h('p', { text: 'History budget: ' + c.history_budget + ' tokens.' }));
      out.append(h('h2', { text: 'System prompt, in order' }));
      for (const part of c.system) {
        out.append(h('details', { class: 'part' }, h('summary', {
          text: part.kind.replace('_', ' ') + (part.label ? ' ' + part.label : '') + ' (' + part.tokens + ' tokens)',
        }), h('pre', { text: part.text })));
      }
      out.append(h('h2', { text: 'Tools' }), h('p', { class: 'mono', text: c.tools.join(', ') || 'none' }));
      out.append(h('details', { id: 'request' }, h('summary', { text: 'The request body, in the provider\'s format' }),
        h('pre', { text: JSON.stringify(c.request, null, 2) })));
      out.append(h('h2', { text: 'History' }), h('p', {
        text: c.messages + ' messages from ' + c.batches.length + ' batches; ' + c.excluded.length + ' batches left out' +
          (c.excluded.length ? ': ' + c.excluded.map((e) => e.batch + ' (' + e.reason + ')').join(', ') : '') + '.',
      }));
    } catch (err) {
      out.append(errorBox(err));
    }
  }

  // ---- live lists of meetings and sessions -------------------------------------------------

  // A table of the organization's meetings or sessions (`GET /v1/{kind}`), filtered by status,
  // read again every two seconds while the page is open; *Older* pages back by the last id.
  function liveList(kind, columns, row) {
    const filter = h('select', { name: 'status', id: kind + '-filter' },
      [['all', 'All'], ['live', 'Live'], ['ended', 'Ended']].map(([v, t]) => h('option', { value: v, text: t })));
    const body = h('tbody', { id: kind + '-list' });
    const table = h('table', {}, h('thead', {}, h('tr', {}, columns.map((c) => h('th', { scope: 'col', text: c })))), body);
    const status = h('p', { role: 'status', class: 'muted', id: kind + '-list-status' });
    const older = h('button', { type: 'button', class: 'secondary', text: 'Older', hidden: true });
    const signal = live.signal;
    let before = null;
    const load = async () => {
      const query = '?limit=20&status=' + enc(filter.value) + (before ? '&before=' + enc(before) : '');
      const list = await api('GET', '/v1/' + kind + query);
      stillHere(signal);
      body.replaceChildren(...list.map(row));
      if (!list.length) body.append(h('tr', {}, h('td', { colspan: columns.length, class: 'muted', text: 'None.' })));
      older.hidden = list.length < 20;
      older.dataset.last = list.length ? list[list.length - 1].id : '';
      status.textContent = (before ? 'An older page' : 'The newest ' + kind) + ', read ' + new Date().toLocaleTimeString();
    };
    filter.addEventListener('change', () => { before = null; load().catch((err) => status.replaceChildren(errorBox(err))); });
    older.addEventListener('click', () => { before = older.dataset.last; load().catch((err) => status.replaceChildren(errorBox(err))); });
    (async () => {
      for (;;) {
        try { await load(); } catch (err) {
          if (err && err.name === 'AbortError') return;
          status.replaceChildren(errorBox(err));
          return;
        }
        await new Promise((resolve) => setTimeout(resolve, 2000));
        if (signal.aborted) return;
      }
    })();
    return h('div', {}, h('div', { class: 'filter' }, field('Show', filter)), table, older, status);
  }

  // ---- meetings ---------------------------------------------------------------------------

  async function renderMeetings() {
    const idInput = h('input', { name: 'meeting', required: true });
    const open = h('form', { id: 'open-meeting', class: 'inline' }, field('Meeting id', idInput), h('button', { type: 'submit', text: 'Open' }));
    open.addEventListener('submit', (ev) => { ev.preventDefault(); location.hash = '#/meetings/' + enc(idInput.value.trim()); });
    const topic = h('input', { name: 'topic', required: true });
    const rounds = h('input', { name: 'rounds', type: 'number', min: 1, max: 100, value: '1' });
    const boxes = h('fieldset', {}, h('legend', { text: 'Agents, in speaking order (the first hosts)' }));
    const out = h('div', {});
    const run = h('form', { id: 'run-meeting' }, field('Topic', topic), boxes, field('Rounds', rounds),
      h('button', { type: 'submit', text: 'Start the meeting' }), out);
    page('Meetings', h('h2', { text: 'The organization\'s meetings' }), h('div', { id: 'meeting-list-box' }), open,
      h('h2', { text: 'Hold a meeting' }), run);
    try {
      const agents = await loadAgentNames();
      document.getElementById('meeting-list-box').append(liveList('meetings',
        ['Meeting', 'Status', 'Host', 'Speaker', 'Participants', 'Created'], (m) => h('tr', {},
          h('td', {}, link('#/meetings/' + enc(m.id), m.id, { class: 'mono' })), h('td', { text: m.status }),
          h('td', { text: nameOf(m.host) }), h('td', { text: m.speaker ? nameOf(m.speaker) : '—' }),
          h('td', { text: m.participants.map((p) => nameOf(p.agent)).join(', ') }), h('td', { text: when(m.created_at) }))));
      for (const a of agents) {
        const box = h('input', { type: 'checkbox', value: a.id, name: 'agents' });
        boxes.append(h('label', { class: 'check' }, box, ' ' + a.name));
      }
    } catch (err) {
      boxes.append(errorBox(err));
    }
    run.addEventListener('submit', async (ev) => {
      ev.preventDefault();
      const agents = [...boxes.querySelectorAll('input:checked')].map((b) => b.value);
      try {
        const m = await api('POST', '/v1/meetings/run', { topic: topic.value, agents, rounds: Number(rounds.value) });
        location.hash = '#/meetings/' + enc(m.id);
      } catch (err) {
        out.replaceChildren(errorBox(err, 'Not started'));
      }
    });
  }

  // What a protocol message says: its text, else its content as JSON.
  function speech(content) {
    if (typeof content === 'string') return content;
    if (content && typeof content.text === 'string') return content.text;
    return JSON.stringify(content);
  }

  async function renderMeeting(id) {
    let meeting;
    const signal = live.signal;
    try {
      await loadAgentNames();
      meeting = await api('GET', '/v1/meetings/' + enc(id));
      stillHere(signal);
    } catch (err) { return notFound(err); }
    const summary = h('div', { id: 'meeting-summary' });
    const transcript = h('ol', { class: 'transcript', id: 'transcript', 'aria-label': 'Transcript' });
    const log = h('ol', { id: 'events', class: 'mono', 'aria-label': 'Event log' });
    const runs = h('ol', { class: 'transcript', id: 'runs', 'aria-label': 'Speakers\' runs' });
    const status = h('p', { role: 'status', class: 'muted', id: 'meeting-status' });
    page('Meeting ' + id, summary, h('h2', { text: 'Transcript' }), transcript,
      h('h2', { text: 'Speakers\' runs, live' }), runs, h('h2', { text: 'Event log' }), status, log);
    // One entry per turn and attempt: the speaker's run output (text as it streams, tool calls,
    // results, errors) before its speech reaches the transcript.
    const turns = new Map();
    const showOutput = (d) => {
      const key = d.turn + ':' + d.attempt;
      let entry = turns.get(key);
      if (!entry) {
        entry = { text: h('span', { class: 'answer' }), lines: h('ul', {}) };
        runs.append(h('li', { 'data-turn': key },
          h('span', { class: 'who', text: nameOf(d.speaker) + (d.attempt > 1 ? ' (attempt ' + d.attempt + ')' : '') + ':' }),
          entry.text, entry.lines));
        turns.set(key, entry);
      }
      const e = d.event || {};
      if (e.type === 'text_delta') entry.text.append(e.text || '');
      else if (e.type === 'tool_call_finished') entry.lines.append(h('li', { class: 'mono', text: 'call ' + e.name + '(' + JSON.stringify(e.input) + ')' }));
      else if (e.type === 'tool_result') entry.lines.append(h('li', { class: 'mono' + (e.is_error ? ' error' : ''), text: (e.is_error ? 'error: ' : 'result: ') + e.content }));
      else if (e.type === 'error') entry.lines.append(h('li', { class: 'error', text: 'failed: ' + (e.message || (e.error && e.error.message) || '') }));
    };
    const showSummary = (m) => {
      summary.replaceChildren(
        h('p', {}, 'Status: ', h('strong', { id: 'meeting-state', text: m.status }), ' · hosted by ' + nameOf(m.host) +
          (m.speaker ? ' · speaking: ' + nameOf(m.speaker) : '') +
          (m.turn_deadline ? ' · turn ends ' + when(m.turn_deadline) : '')),
        h('ul', {}, m.participants.map((p) => h('li', { text: nameOf(p.agent) + ' — ' + p.status }))));
    };
    const refresh = async () => {
      const [m, said] = await Promise.all([
        api('GET', '/v1/meetings/' + enc(id)), api('GET', '/v1/meetings/' + enc(id) + '/messages')]);
      showSummary(m);
      transcript.replaceChildren(...said.map((msg) => h('li', {},
        h('span', { class: 'who', text: nameOf(msg.from) + ':' }),
        speech(msg.content))));
      if (!said.length) transcript.append(h('li', { class: 'muted', text: 'Nothing said yet.' }));
    };
    showSummary(meeting);
    let pending = null;
    const later = () => {
      if (pending) return;
      pending = setTimeout(() => { pending = null; refresh().catch(() => {}); }, 150);
    };
    try {
      await refresh();
      status.textContent = 'Following the meeting live…';
      await stream('GET', '/v1/meetings/' + enc(id) + '/events', undefined, {}, null, (ev) => {
        const d = ev.data || {};
        if (ev.event === 'error') {
          log.append(h('li', { class: 'error' }, 'stream error: ' + ((d.error && d.error.message) || '')));
          return;
        }
        if (ev.event === 'output') {
          showOutput(d);
          return;
        }
        log.append(h('li', {}, '#' + (d.seq || ev.id) + ' ' + (d.event_type || ev.event) +
          (d.agent ? ' · ' + nameOf(d.agent) : '') + ' · ' + when(d.created_at)));
        later();
      });
      await refresh();
      status.textContent = 'The meeting is over.';
    } catch (err) {
      if (!(err && err.name === 'AbortError')) status.replaceChildren(errorBox(err));
    }
  }

  // ---- sessions ---------------------------------------------------------------------------

  async function renderSessions() {
    const idInput = h('input', { name: 'session', required: true });
    const open = h('form', { id: 'open-session', class: 'inline' }, field('Session id', idInput), h('button', { type: 'submit', text: 'Open' }));
    open.addEventListener('submit', (ev) => { ev.preventDefault(); location.hash = '#/sessions/' + enc(idInput.value.trim()); });
    const from = h('select', { name: 'from' });
    const to = h('select', { name: 'to' });
    const kind = h('select', { name: 'session_type' }, [['sync', 'sync (strict turns)'], ['async', 'async (inboxes)']]
      .map(([v, t]) => h('option', { value: v, text: t })));
    const out = h('div', {});
    const start = h('form', { id: 'start-session' }, field('From', from), field('To', to), field('Type', kind),
      h('button', { type: 'submit', text: 'Open the session' }), out);
    page('Sessions', h('h2', { text: 'The organization\'s sessions' }), h('div', { id: 'session-list-box' }), open,
      h('h2', { text: 'Open (or find the live) session between two agents' }), start);
    try {
      const agents = await loadAgentNames();
      document.getElementById('session-list-box').append(liveList('sessions',
        ['Session', 'Agents', 'Type', 'Status', 'Turn', 'Messages', 'Opened'], (x) => h('tr', {},
          h('td', {}, link('#/sessions/' + enc(x.id), x.id, { class: 'mono' })),
          h('td', { text: nameOf(x.agent_a) + ' and ' + nameOf(x.agent_b) }), h('td', { text: x.session_type }),
          h('td', { text: x.status }), h('td', { text: x.turn ? nameOf(x.turn) : '—' }),
          h('td', { text: String(x.messages_sent) }), h('td', { text: when(x.created_at) }))));
      for (const select of [from, to]) {
        select.append(...agents.map((a) => h('option', { value: a.id, text: a.name })));
      }
      if (agents.length > 1) to.value = agents[1].id;
    } catch (err) {
      out.append(errorBox(err));
    }
    start.addEventListener('submit', async (ev) => {
      ev.preventDefault();
      try {
        const session = await api('POST', '/v1/sessions', { from: from.value, to: to.value, session_type: kind.value });
        location.hash = '#/sessions/' + enc(session.id);
      } catch (err) {
        out.replaceChildren(errorBox(err, 'Not opened'));
      }
    });
  }

  // A session's state and transcript, read again every second until it ends (sessions have no
  // event stream).
  async function renderSession(id) {
    let session;
    const signal = live.signal;
    try {
      await loadAgentNames();
      session = await api('GET', '/v1/sessions/' + enc(id));
      stillHere(signal);
    } catch (err) { return notFound(err); }
    const summary = h('div', { id: 'session-summary' });
    const transcript = h('ol', { class: 'transcript', id: 'session-transcript', 'aria-label': 'Transcript' });
    const status = h('p', { role: 'status', class: 'muted', id: 'session-status' });
    page('Session ' + id, summary, h('h2', { text: 'Transcript' }), transcript, status);
    for (;;) {
      try {
        // The state and the transcript read together, so the page never shows one older.
        const [now, said] = await Promise.all([
          api('GET', '/v1/sessions/' + enc(id)), api('GET', '/v1/sessions/' + enc(id) + '/messages')]);
        session = now;
        summary.replaceChildren(h('p', {}, 'Status: ', h('strong', { id: 'session-state', text: session.status }),
          ' · ' + session.session_type + ' · ' + nameOf(session.agent_a) + ' and ' + nameOf(session.agent_b) +
          (session.turn ? ' · turn: ' + nameOf(session.turn) : '') + ' · opened ' + when(session.created_at) +
          (session.ended_at ? ' · ended ' + when(session.ended_at) : '')));
        transcript.replaceChildren(...said.map((msg) => h('li', {},
          h('span', { class: 'who', text: nameOf(msg.from) + ':' }), speech(msg.content),
          h('span', { class: 'muted', text: ' · ' + when(msg.created_at) }))));
        if (!said.length) transcript.append(h('li', { class: 'muted', text: 'Nothing said yet.' }));
        if (session.status === 'ended') {
          status.textContent = 'The session is over.';
          return;
        }
        status.textContent = 'Following the session (read again every second)…';
        await new Promise((resolve) => setTimeout(resolve, 1000));
        if (signal.aborted) return;
      } catch (err) {
        if (!(err && err.name === 'AbortError')) status.replaceChildren(errorBox(err));
        return;
      }
    }
  }

  // ---- approvals ---------------------------------------------------------------------------

  // The organization's approval requests; pending ones can be approved or denied (the first
  // answer from anywhere wins: the server's decision is shown).
  async function renderApprovals() {
    const filter = h('select', { name: 'state', id: 'approval-filter' },
      ['pending', 'approved', 'denied', 'timed_out', 'abandoned', 'all'].map((v) => h('option', { value: v, text: v.replace('_', ' ') })));
    const body = h('tbody', { id: 'approval-list' });
    const out = h('div', {});
    page('Approvals', h('div', { class: 'filter' }, field('Show', filter)), h('table', {}, h('thead', {}, h('tr', {},
      ['Agent', 'Tool', 'Input', 'Reason', 'State', 'Deadline', ''].map((c) => h('th', { scope: 'col', text: c })))), body), out);
    const load = async () => {
      await loadAgentNames();
      const list = await api('GET', '/v1/approvals?limit=100&state=' + enc(filter.value));
      body.replaceChildren(...list.map((a) => {
        const actions = h('td', {});
        if (a.state === 'pending') {
          const reason = h('input', { name: 'reason', placeholder: 'reason to deny' });
          const decide = (decision) => async () => {
            try {
              const done = await api('POST', '/v1/approvals/' + enc(a.id),
                decision === 'deny' ? { decision, reason: reason.value } : { decision });
              out.replaceChildren(h('p', { role: 'status', text: 'Request ' + done.id + ': ' + done.state + '.' }));
            } catch (err) { out.replaceChildren(errorBox(err, 'Not decided')); }
            await load().catch((err) => out.append(errorBox(err)));
          };
          actions.append(h('button', { type: 'button', text: 'Approve', onclick: decide('approve') }), ' ',
            field('Reason', reason), h('button', { type: 'button', class: 'secondary', text: 'Deny', onclick: decide('deny') }));
        }
        return h('tr', {}, h('td', { text: nameOf(a.agent_id) }), h('td', { text: a.tool }),
          h('td', {}, h('pre', { text: JSON.stringify(a.input, null, 2) })), h('td', { text: a.reason }),
          h('td', { text: a.state + (a.denial_reason ? ' (' + a.denial_reason + ')' : '') }), h('td', { text: when(a.deadline) }), actions);
      }));
      if (!list.length) body.append(h('tr', {}, h('td', { colspan: 7, class: 'muted', text: 'No requests.' })));
    };
    filter.addEventListener('change', () => load().catch((err) => out.replaceChildren(errorBox(err))));
    await load();
  }

  // ---- schedules and MCP servers of an agent --------------------------------------------------

  async function renderSchedules(id) {
    let agent;
    try { agent = await api('GET', '/v1/agents/' + enc(id)); } catch (err) { return notFound(err); }
    const body = h('tbody', { id: 'schedule-list' });
    const message = h('input', { name: 'message', required: true });
    const cron = h('input', { name: 'cron', placeholder: '0 9 * * MON-FRI' });
    const at = h('input', { name: 'at', placeholder: '2026-12-01T09:00:00Z' });
    const tz = h('input', { name: 'tz', placeholder: 'UTC' });
    const name = h('input', { name: 'name' });
    const out = h('div', {});
    const form = h('form', { id: 'add-schedule' }, field('Message', message), field('Cron (repeating)', cron),
      field('Or once at (RFC 3339)', at), field('Time zone', tz), field('Name', name),
      h('button', { type: 'submit', text: 'Add the schedule' }), out);
    page('Schedules of ' + agent.name, agentLinks(id), h('table', {}, h('thead', {}, h('tr', {},
      ['Name', 'When', 'Next', 'Deliveries', 'Message', ''].map((c) => h('th', { scope: 'col', text: c })))), body),
    h('h2', { text: 'Add a schedule' }), form);
    const load = async () => {
      const list = await api('GET', '/v1/agents/' + enc(id) + '/schedules');
      body.replaceChildren(...list.map((x) => h('tr', {}, h('td', { text: x.name || x.id }),
        h('td', { text: x.cron ? x.kind + ' ' + x.cron + ' (' + x.tz + ')' : x.kind }), h('td', { text: when(x.next_at) }),
        h('td', { text: String(x.deliveries) }), h('td', { text: x.message }),
        h('td', {}, h('button', { type: 'button', class: 'secondary', text: 'Delete', onclick: async () => {
          try { await api('DELETE', '/v1/agents/' + enc(id) + '/schedules/' + enc(x.id)); } catch (err) { out.replaceChildren(errorBox(err)); }
          await load().catch((err) => out.replaceChildren(errorBox(err)));
        } })))));
      if (!list.length) body.append(h('tr', {}, h('td', { colspan: 6, class: 'muted', text: 'No schedules.' })));
    };
    form.addEventListener('submit', async (ev) => {
      ev.preventDefault();
      const request = { message: message.value };
      if (cron.value.trim()) request.cron = cron.value.trim();
      if (at.value.trim()) request.at = at.value.trim();
      if (tz.value.trim()) request.tz = tz.value.trim();
      if (name.value.trim()) request.name = name.value.trim();
      try {
        await api('POST', '/v1/agents/' + enc(id) + '/schedules', request);
        out.replaceChildren(h('p', { role: 'status', class: 'ok', text: 'Added.' }));
        await load();
      } catch (err) { out.replaceChildren(errorBox(err, 'Not added')); }
    });
    await load();
  }

  async function renderMcp(id) {
    let agent;
    let current;
    try {
      agent = await api('GET', '/v1/agents/' + enc(id));
      current = await api('GET', '/v1/agents/' + enc(id) + '/mcp-servers');
    } catch (err) { return notFound(err); }
    const names = Object.keys(current.servers);
    const text = h('textarea', { name: 'servers', rows: 10, class: 'mono' });
    text.value = JSON.stringify(current, null, 2);
    const out = h('div', {});
    const form = h('form', { id: 'mcp-servers' }, field('Servers (JSON: {"servers": {name: configuration}})', text),
      h('button', { type: 'submit', text: 'Replace all' }), out);
    page('MCP servers of ' + agent.name, agentLinks(id),
      h('p', { id: 'mcp-names', text: names.length ? 'Configured: ' + names.join(', ') : 'No MCP servers.' }), form);
    form.addEventListener('submit', async (ev) => {
      ev.preventDefault();
      let body;
      try { body = JSON.parse(text.value); } catch (err) {
        out.replaceChildren(h('div', { class: 'error', role: 'alert', text: 'Not JSON: ' + err.message }));
        return;
      }
      try {
        const saved = await api('PUT', '/v1/agents/' + enc(id) + '/mcp-servers', body);
        text.value = JSON.stringify(saved, null, 2);
        out.replaceChildren(h('p', { role: 'status', class: 'ok', text: 'Saved; the agent uses them from its next turn.' }));
      } catch (err) { out.replaceChildren(errorBox(err, 'Not saved')); }
    });
  }

  // ---- routing ----------------------------------------------------------------------------

  async function route() {
    live.abort();
    live = new AbortController();
    notice.textContent = '';
    const parts = location.hash.replace(/^#\/?/, '').split('/').filter(Boolean).map((p) => {
      try { return decodeURIComponent(p); } catch (_) { return p; }
    });
    if (!sessionStorage.getItem(KEY) || parts[0] === 'login') {
      if (sessionStorage.getItem(KEY)) { location.hash = '#/agents'; return; }
      renderLogin();
      return;
    }
    nav.hidden = false;
    try {
      if (parts[0] === 'agents' && parts[1]) {
        const which = { undefined: renderChat, batches: renderBatches, memory: renderMemory, archival: renderArchival, context: renderContext, schedules: renderSchedules, mcp: renderMcp }[parts[2]];
        if (which) await which(parts[1]);
        else page('Not found', h('p', { text: 'No such page.' }));
      } else if (parts[0] === 'sessions' && parts[1]) await renderSession(parts[1]);
      else if (parts[0] === 'sessions') await renderSessions();
      else if (parts[0] === 'meetings' && parts[1]) await renderMeeting(parts[1]);
      else if (parts[0] === 'meetings') await renderMeetings();
      else if (parts[0] === 'approvals') await renderApprovals();
      else if (!parts.length || parts[0] === 'agents') await renderAgents();
      else page('Not found', h('p', { text: 'No such page.' }));
    } catch (err) {
      if (!(err && err.name === 'AbortError')) notice.textContent = describe(err);
    }
    main.focus({ preventScroll: true });
  }

  // The skip link focuses the content; as a plain `#main` link it would change the route.
  document.querySelector('.skip').addEventListener('click', (ev) => {
    ev.preventDefault();
    main.focus();
  });

  window.addEventListener('hashchange', route);
  route();
})();
