// The admin pages' script (served as /admin/static/admin.js; the pages' Content-Security-Policy forbids
// inline script). Every action is a call to the JSON API, named by its button:
//   data-call="METHOD /path"        the call; `{id}` in the path is replaced by each selected job's id
//   data-body='{"json":1}'          its body
//   data-body-from="element-id"     its body: the text of that textarea or input
//   data-delay-from="element-id"    its body: {"delay_ms": <that input's seconds × 1000>}
//   data-priority-from="element-id" its body: {"priority": <that input's number>}
//   data-ids                        its body: {"ids": [the selected jobs' ids]}
//   data-each                       one call per selected job (the path holds `{id}`)
//   data-confirm="question?"        asked first
//   data-go="/path"                 where to go after success (else the page reloads)
// A refused call shows the API's message and changes nothing more.
function picked() {
  return [...document.querySelectorAll('input.pick:checked')].map((c) => c.value);
}

async function send(method, path, body) {
  const init = {method, headers: {'content-type': 'application/json'}};
  if (body !== undefined) init.body = body;
  const r = await fetch(path, init);
  if (r.ok) return null;
  const e = await r.json().catch(() => ({}));
  return (e.error && e.error.message) || String(r.status);
}

document.addEventListener('click', async (event) => {
  const button = event.target.closest('button[data-call]');
  if (!button) return;
  const d = button.dataset;
  const ids = picked();
  if ((d.each !== undefined || d.ids !== undefined) && ids.length === 0) {
    alert('Select jobs first.');
    return;
  }
  if (d.confirm && !confirm(d.confirm)) return;
  const [method, path] = d.call.split(' ');
  let body = d.body;
  if (d.bodyFrom) body = document.getElementById(d.bodyFrom).value;
  if (d.delayFrom) {
    const seconds = Number(document.getElementById(d.delayFrom).value);
    body = JSON.stringify({delay_ms: Math.round(seconds * 1000)});
  }
  if (d.priorityFrom) {
    body = JSON.stringify({priority: Number(document.getElementById(d.priorityFrom).value)});
  }
  if (d.ids !== undefined) body = JSON.stringify({ids});
  const errors = [];
  if (d.each !== undefined) {
    for (const id of ids) {
      const e = await send(method, path.replace('{id}', encodeURIComponent(id)), body);
      if (e) errors.push(id + ': ' + e);
    }
  } else {
    const e = await send(method, path, body);
    if (e) errors.push(e);
  }
  if (errors.length) {
    alert(errors.join('\n'));
    if (d.each === undefined) return;
  }
  if (d.go && !errors.length) location.href = d.go; else location.reload();
});

document.addEventListener('change', (event) => {
  if (event.target.matches('input.pick-all')) {
    document.querySelectorAll('input.pick').forEach((c) => { c.checked = event.target.checked; });
  }
});
