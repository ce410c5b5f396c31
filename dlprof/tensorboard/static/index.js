// The dlprof tab: a list of the runs under the logdir and the chosen run's report (the newest run's at first).
// TensorBoard loads this module in an iframe of its own (base href /data/plugin/dlprof/), so the report's page and
// its CSS are put straight in it.

const POLL_MS = 1000;

function element(tag, attributes = {}, text = '') {
  const node = document.createElement(tag);
  for (const [key, value] of Object.entries(attributes)) node.setAttribute(key, value);
  if (text) node.textContent = text;
  return node;
}

function line(text) {
  return element('p', {class: 'dlprof-line', style: 'padding: 0 16px; font: 14px sans-serif'}, text);
}

async function showReport(name, target) {
  target.replaceChildren(line(`analysing ${name}…`));
  for (;;) {
    if (target.dataset.run !== name) return;  // another run was picked meanwhile
    let response;
    try {
      response = await fetch(`./report?run=${encodeURIComponent(name)}`);
    } catch (error) {
      target.replaceChildren(line(`dlprof: TensorBoard did not answer (${error})`));
      return;
    }
    if (response.status === 202) {
      await new Promise((resolve) => setTimeout(resolve, POLL_MS));
      continue;
    }
    const page = new DOMParser().parseFromString(await response.text(), 'text/html');
    if (target.dataset.run !== name) return;
    const styles = [...page.head.querySelectorAll('style')].map((style) => document.importNode(style, true));
    target.replaceChildren(...styles, ...[...page.body.childNodes].map((node) => document.importNode(node, true)));
    return;
  }
}

export async function render() {
  document.body.style.margin = '0';
  const bar = element('div', {id: 'dlprof-bar', style: 'padding: 8px 16px; font: 14px sans-serif'});
  const picker = element('select', {id: 'dlprof-runs'});
  const target = element('div', {id: 'dlprof-report'});
  bar.append(element('label', {for: 'dlprof-runs'}, 'run '), picker);
  document.body.append(bar, target);
  let listing;
  try {
    listing = await (await fetch('./runs')).json();
  } catch (error) {
    target.replaceChildren(line(`dlprof: cannot list the runs (${error})`));
    return;
  }
  if (!listing.runs.length) {
    const where = listing.logdir ? ` under ${listing.logdir}` : '';
    target.replaceChildren(line(`dlprof: no run${where}; record one with 'dlprof record'`));
    return;
  }
  for (const run of listing.runs) picker.append(element('option', {value: run.name}, run.name));
  if (listing.newest) picker.value = listing.newest;
  const pick = () => {
    target.dataset.run = picker.value;
    showReport(picker.value, target);
  };
  picker.addEventListener('change', pick);
  pick();
}
