// Prometheus's text format, read into samples: what the operator page draws from.

const SAMPLE = /^([A-Za-z_:][\w:]*)(?:\{(.*)\})?\s+(\S+)/;
const LABEL = /([A-Za-z_]\w*)="((?:[^"\\]|\\.)*)"/g;
const UNESCAPE = { n: "\n", "\\": "\\", '"': '"' };

/** Every sample of the text: {name, labels, value}; comments and blank lines skipped. */
export function parseMetrics(text) {
  const samples = [];
  for (const line of text.split("\n")) {
    if (!line || line.startsWith("#")) continue;
    const match = SAMPLE.exec(line);
    if (!match) continue;
    const labels = {};
    for (const [, key, raw] of (match[2] || "").matchAll(LABEL)) {
      labels[key] = raw.replace(/\\(.)/g, (_, c) => UNESCAPE[c] ?? c);
    }
    samples.push({ name: match[1], labels, value: Number(match[3]) });
  }
  return samples;
}

/** The samples named `name`. */
export function named(samples, name) {
  return samples.filter((sample) => sample.name === name);
}

/** The sum of the samples named `name`, or null when there is none. */
export function total(samples, name) {
  const found = named(samples, name);
  return found.length ? found.reduce((sum, sample) => sum + sample.value, 0) : null;
}

/** {label value: summed value} of the samples named `name`, by one label. */
export function byLabel(samples, name, label) {
  const out = {};
  for (const sample of named(samples, name)) {
    const key = sample.labels[label] ?? "";
    out[key] = (out[key] || 0) + sample.value;
  }
  return out;
}
