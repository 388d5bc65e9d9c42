// The slice viewer of zarrcoro-server: draws a 2-D slice of a numeric array.
//
// Served at /view/<array> (the same page for every array: the array's path
// is read from the URL). It uses two endpoints of the server:
//   GET /api/v1/<array>/info            the array's metadata (shape, data type)
//   GET /api/v1/<array>?region=a:b,...  a decoded region as .npy
// and requests only the region visible on the canvas. The slice API has no
// step (no server-side downsampling), so a visible region of more than
// MAX_ELEMENTS elements is cut down to a window of that many around the
// centre of the view, and the page says so.
//
// URL parameters (kept up to date while you use the page, so that a view can
// be shared): cmap=gray|viridis|hot, min=, max= (a fixed contrast range;
// without them the range follows the data shown), y=, x= (the displayed
// dimensions), at=i,j,k (the indices of the other dimensions).
//
// After each draw, document.title is "ok <array>"; on an error it is
// "error: <message>" and the message is shown on the page. The canvas
// carries the drawn view in its data-drawn attribute (JSON: region, scale,
// offsets, contrast), which tests/viewer/test_viewer.py reads.
//
// Nothing here builds HTML from strings: every name goes through textContent.
// The .npy parser and the colour maps also load under node (module.exports)
// for tests/viewer/npy_test.js.
(function () {
  'use strict';

  // The most elements one request asks for (8 MiB of float32).
  const MAX_ELEMENTS = 1 << 21;
  // How long the view must stay still before the visible region is requested.
  const FETCH_DELAY_MS = 80;

  // ---- .npy parsing ----------------------------------------------------------

  // True on little-endian hosts ('=' in a descr means the host's order).
  const HOST_LITTLE = new Uint8Array(new Uint16Array([1]).buffer)[0] === 1;

  // An IEEE 754 half-precision value from its 16 bits.
  function decodeFloat16(bits) {
    const sign = bits & 0x8000 ? -1 : 1;
    const exponent = (bits >> 10) & 0x1f;
    const fraction = bits & 0x3ff;
    if (exponent === 0) return sign * fraction * Math.pow(2, -24);  // zero, subnormal
    if (exponent === 0x1f) return fraction ? NaN : sign * Infinity;
    return sign * (1 + fraction / 1024) * Math.pow(2, exponent - 15);
  }

  // A function (DataView, byte offset) -> Number for a numeric descr such as
  // '<f4', '>i8', '|u1', '|b1'; throws for other descrs.
  function elementReader(descr) {
    const m = /^([<>|=])([biuf])(\d+)$/.exec(descr);
    if (!m) {
      const what = /^[<>|=]?c/.test(descr) ? 'complex' : 'not numeric';
      throw new Error('data type ' + descr + ' is ' + what + ': the viewer draws numeric arrays only');
    }
    const little = m[1] === '<' || m[1] === '|' || (m[1] === '=' && HOST_LITTLE);
    const kind = m[2];
    const size = Number(m[3]);
    const readers = {
      b1: (dv, o) => (dv.getUint8(o) ? 1 : 0),
      i1: (dv, o) => dv.getInt8(o),
      i2: (dv, o) => dv.getInt16(o, little),
      i4: (dv, o) => dv.getInt32(o, little),
      i8: (dv, o) => Number(dv.getBigInt64(o, little)),
      u1: (dv, o) => dv.getUint8(o),
      u2: (dv, o) => dv.getUint16(o, little),
      u4: (dv, o) => dv.getUint32(o, little),
      u8: (dv, o) => Number(dv.getBigUint64(o, little)),
      f2: (dv, o) => decodeFloat16(dv.getUint16(o, little)),
      f4: (dv, o) => dv.getFloat32(o, little),
      f8: (dv, o) => dv.getFloat64(o, little),
    };
    const read = readers[kind + size];
    if (!read) throw new Error('data type ' + descr + ' is not supported by the viewer');
    return { read, size };
  }

  // Parses a .npy file (format 1.0, 2.0 or 3.0) holding a numeric array:
  // {descr, shape, fortranOrder, values (a Float64Array, in file order)}.
  function parseNpy(buffer) {
    const bytes = new Uint8Array(buffer);
    const magic = [0x93, 0x4e, 0x55, 0x4d, 0x50, 0x59];  // "\x93NUMPY"
    if (bytes.length < 10 || magic.some((b, i) => bytes[i] !== b)) throw new Error('not a .npy file');
    const major = bytes[6];
    if (major < 1 || major > 3) throw new Error('unsupported .npy version ' + major + '.' + bytes[7]);
    const dv = new DataView(buffer);
    const headerStart = major === 1 ? 10 : 12;
    if (bytes.length < headerStart) throw new Error('truncated .npy header');
    const headerLength = major === 1 ? dv.getUint16(8, true) : dv.getUint32(8, true);
    const dataStart = headerStart + headerLength;
    if (bytes.length < dataStart) throw new Error('truncated .npy header');
    const header = new TextDecoder(major === 3 ? 'utf-8' : 'latin1').decode(bytes.subarray(headerStart, dataStart));

    // The header is a Python dict literal: {'descr': '<f4', 'fortran_order': False, 'shape': (3, 4), }
    const descrMatch = /'descr'\s*:\s*'([^']*)'/.exec(header);
    if (!descrMatch) {
      const structured = /'descr'\s*:\s*\[/.test(header);
      throw new Error(structured ? 'structured data types are not numeric: the viewer draws numeric arrays only'
                                 : 'malformed .npy header (no descr)');
    }
    const fortranMatch = /'fortran_order'\s*:\s*(True|False)/.exec(header);
    const shapeMatch = /'shape'\s*:\s*\(([^)]*)\)/.exec(header);
    if (!fortranMatch || !shapeMatch) throw new Error('malformed .npy header');
    const shape = shapeMatch[1].split(',').map((s) => s.trim()).filter((s) => s !== '').map(Number);
    if (shape.some((n) => !Number.isSafeInteger(n) || n < 0)) throw new Error('malformed .npy shape');

    const descr = descrMatch[1];
    const { read, size } = elementReader(descr);
    const count = shape.reduce((a, b) => a * b, 1);
    if (bytes.length < dataStart + count * size) {
      throw new Error('truncated .npy data: ' + (bytes.length - dataStart) + ' bytes for ' + count + ' elements of ' + descr);
    }
    const values = new Float64Array(count);
    for (let k = 0, o = dataStart; k < count; k++, o += size) values[k] = read(dv, o);
    return { descr, shape, fortranOrder: fortranMatch[1] === 'True', values };
  }

  // ---- colour maps -----------------------------------------------------------

  // Colour maps as 256 RGBA entries, computed here (nothing is fetched).
  // 'viridis' interpolates linearly between nine of matplotlib's viridis
  // colours (perceptually ordered: luminance grows from 0 to 1).
  const VIRIDIS_ANCHORS = [
    [0x44, 0x01, 0x54], [0x47, 0x2c, 0x7a], [0x3b, 0x51, 0x8b], [0x2c, 0x71, 0x8e], [0x21, 0x90, 0x8d],
    [0x27, 0xad, 0x81], [0x5c, 0xc8, 0x63], [0xaa, 0xdc, 0x32], [0xfd, 0xe7, 0x25],
  ];

  function interpolate(anchors, t) {
    const x = t * (anchors.length - 1);
    const i = Math.min(anchors.length - 2, Math.floor(x));
    const f = x - i;
    return anchors[i].map((c, k) => Math.round(c + (anchors[i + 1][k] - c) * f));
  }

  const COLORMAPS = {
    gray: (t) => { const v = Math.round(t * 255); return [v, v, v]; },
    viridis: (t) => interpolate(VIRIDIS_ANCHORS, t),
    // black, red, yellow, white
    hot: (t) => [3 * t, 3 * t - 1, 3 * t - 2].map((c) => Math.round(255 * Math.min(1, Math.max(0, c)))),
  };

  function makeLut(name) {
    const lut = new Uint8ClampedArray(256 * 4);
    for (let i = 0; i < 256; i++) {
      const [r, g, b] = COLORMAPS[name](i / 255);
      lut.set([r, g, b, 255], i * 4);
    }
    return lut;
  }

  if (typeof module === 'object' && module.exports) {
    module.exports = { parseNpy, decodeFloat16, makeLut, COLORMAPS, MAX_ELEMENTS };
  }
  if (typeof document === 'undefined') return;  // under node: the parts above only

  // ---- the page --------------------------------------------------------------

  const NUMERIC = new Set(['bool', 'int8', 'int16', 'int32', 'int64', 'uint8', 'uint16', 'uint32', 'uint64',
                           'float16', 'float32', 'float64']);

  const $ = (id) => document.getElementById(id);
  const clamp = (v, lo, hi) => Math.min(hi, Math.max(lo, v));

  // The array's path, from /view/<path>: the decoded segments, and as sent
  // to the API (each segment percent-encoded).
  function arrayPathFromLocation() {
    const rest = location.pathname.replace(/^\/view\/?/, '').replace(/\/$/, '');
    const segments = rest === '' ? [] : rest.split('/').map(decodeURIComponent);
    return { name: segments.join('/'), url: segments.map(encodeURIComponent).join('/') };
  }

  const path = arrayPathFromLocation();
  const displayName = path.name === '' ? '/' : path.name;
  const infoUrl = '/api/v1/' + (path.url ? path.url + '/' : '') + 'info';
  const sliceUrl = path.url ? '/api/v1/' + path.url : '/api/v1';

  const state = {
    shape: [],
    rank: 0,
    dtype: '',
    dimY: -1,        // the dimension shown down the canvas; -1: none (rank 0 or 1)
    dimX: -1,        // the dimension shown across; -1: none (rank 0)
    index: [],       // per dimension: the index shown (for the other dimensions)
    cmap: 'viridis',
    lut: null,
    vmin: 0,
    vmax: 1,
    auto: true,      // the contrast range follows the data shown
    view: { x0: 0, y0: 0, scale: 1 },  // array coordinates at the canvas's top-left; CSS px per element
    tile: null,      // the region drawn: {key, x0, y0, x1, y1, w, h, values, min, max, image}
    pending: null,   // the request in flight: {key, region, controller}
    timer: 0,
    ready: false,
  };

  const canvas = $('canvas');
  const ctx = canvas.getContext('2d');

  // ---- messages ----

  function showError(message) {
    const box = $('error');
    box.textContent = message;
    box.hidden = false;
    document.title = 'error: ' + message;
    $('status').textContent = 'failed';
  }

  function clearError() {
    $('error').hidden = true;
    $('error').textContent = '';
  }

  // Any script error ends up on the page, never as a blank page.
  window.addEventListener('error', (e) => showError('script error: ' + e.message));
  window.addEventListener('unhandledrejection', (e) => showError('script error: ' + (e.reason && e.reason.message || e.reason)));

  function formatValue(v) {
    if (!Number.isFinite(v)) return String(v);
    if (Number.isInteger(v)) return String(v);
    return Math.abs(v) >= 1e5 || Math.abs(v) < 1e-3 ? v.toExponential(4) : String(+v.toPrecision(6));
  }

  // ---- geometry ----

  // The slice's extents: [across (x), down (y)].
  function extents() {
    return [state.dimX >= 0 ? state.shape[state.dimX] : 1, state.dimY >= 0 ? state.shape[state.dimY] : 1];
  }

  function canvasSize() {
    return { w: canvas.clientWidth, h: canvas.clientHeight };
  }

  function fitScale() {
    const [ex, ey] = extents();
    const { w, h } = canvasSize();
    return Math.min(w / Math.max(1, ex), h / Math.max(1, ey));
  }

  function scaleLimits() {
    const fit = fitScale();
    return { min: fit / 8, max: Math.max(64, fit * 2) };
  }

  // The whole slice, centred.
  function fitView() {
    const [ex, ey] = extents();
    const { w, h } = canvasSize();
    const s = fitScale();
    state.view = { scale: s, x0: ex / 2 - w / s / 2, y0: ey / 2 - h / s / 2 };
  }

  // Zooms by `factor` keeping the array point under canvas pixel (px, py) still.
  function zoomAt(px, py, factor) {
    const v = state.view;
    const { min, max } = scaleLimits();
    const s = clamp(v.scale * factor, min, max);
    const ax = v.x0 + px / v.scale, ay = v.y0 + py / v.scale;
    state.view = { scale: s, x0: ax - px / s, y0: ay - py / s };
    viewChanged();
  }

  function zoomCentre(factor) {
    const { w, h } = canvasSize();
    zoomAt(w / 2, h / 2, factor);
  }

  function pan(dxPixels, dyPixels) {
    state.view.x0 += dxPixels / state.view.scale;
    state.view.y0 += dyPixels / state.view.scale;
    viewChanged();
  }

  // The region to request: the visible part of the slice, cut down to at
  // most MAX_ELEMENTS around the centre of the view. Null if nothing shows.
  function wantedRegion() {
    const [ex, ey] = extents();
    const { w, h } = canvasSize();
    const v = state.view;
    const x0 = clamp(Math.floor(v.x0), 0, ex), x1 = clamp(Math.ceil(v.x0 + w / v.scale), 0, ex);
    const y0 = clamp(Math.floor(v.y0), 0, ey), y1 = clamp(Math.ceil(v.y0 + h / v.scale), 0, ey);
    if (x1 <= x0 || y1 <= y0) return null;
    let rw = x1 - x0, rh = y1 - y0;
    const visible = rw * rh;
    if (visible <= MAX_ELEMENTS) return { x0, x1, y0, y1, visible, capped: false };
    rh = Math.min(rh, Math.max(1, Math.floor(Math.sqrt(MAX_ELEMENTS * rh / rw))));
    rw = Math.min(rw, Math.floor(MAX_ELEMENTS / rh));
    const cx = v.x0 + w / v.scale / 2, cy = v.y0 + h / v.scale / 2;
    const sx = clamp(Math.round(cx - rw / 2), x0, x1 - rw), sy = clamp(Math.round(cy - rh / 2), y0, y1 - rh);
    return { x0: sx, x1: sx + rw, y0: sy, y1: sy + rh, visible, capped: true };
  }

  // Identifies the 2-D slice (displayed dimensions and the other indices).
  function sliceKey() {
    const fixed = state.index.filter((_, d) => d !== state.dimX && d !== state.dimY);
    return state.dimY + '/' + state.dimX + '/' + fixed.join(',');
  }

  // The region parameter of the slice API for a 2-D window of the slice.
  function regionText(r) {
    const parts = [];
    for (let d = 0; d < state.rank; d++) {
      if (d === state.dimX) parts.push(r.x0 + ':' + r.x1);
      else if (d === state.dimY) parts.push(r.y0 + ':' + r.y1);
      else parts.push(String(state.index[d]));
    }
    return parts.join(',');
  }

  // ---- loading ----

  function viewChanged() {
    draw();
    scheduleFetch();
  }

  function scheduleFetch(delay = FETCH_DELAY_MS) {
    clearTimeout(state.timer);
    state.timer = setTimeout(fetchVisible, delay);
  }

  // Requests the visible region unless the tile drawn already covers it.
  function fetchVisible() {
    if (!state.ready) return;
    const r = wantedRegion();
    const key = sliceKey();
    const t = state.tile;
    if (!r) {
      $('status').textContent = 'the view is outside the slice';
      document.title = 'ok ' + displayName;
      return;
    }
    $('cap').hidden = !r.capped;
    if (r.capped) {
      $('cap').textContent = 'The visible region has ' + r.visible.toLocaleString('en') + ' elements. The slice API ' +
        'has no step (no downsampling), so only ' + (r.y1 - r.y0) + ' \u00d7 ' + (r.x1 - r.x0) + ' elements (at most ' +
        MAX_ELEMENTS.toLocaleString('en') + ') around the centre are requested. Zoom in to see the rest.';
    }
    if (t && t.key === key && t.x0 <= r.x0 && t.x1 >= r.x1 && t.y0 <= r.y0 && t.y1 >= r.y1) {
      $('status').textContent = t.status;
      document.title = 'ok ' + displayName;
      return;
    }
    const region = regionText(r);
    if (state.pending && state.pending.region === region) return;  // already on its way
    if (state.pending) state.pending.controller.abort();
    const controller = new AbortController();
    const pending = { key, region, controller };
    state.pending = pending;
    $('status').textContent = 'loading ' + region + '\u2026';
    const started = performance.now();
    loadTile(r, key, region, controller.signal)
      .then((tile) => {
        if (state.pending !== pending) return;  // a newer request replaced this one
        state.pending = null;
        state.tile = tile;
        if (state.auto) setRange(tile.min, tile.max);
        renderTile(tile);
        draw();
        clearError();
        const ms = Math.round(performance.now() - started);
        tile.status = 'region [' + region + ']: ' + (tile.w * tile.h).toLocaleString('en') + ' elements in ' + ms + ' ms';
        $('status').textContent = tile.status;
        document.title = 'ok ' + displayName;
      })
      .catch((e) => {
        if (e.name === 'AbortError') return;
        if (state.pending === pending) state.pending = null;
        showError(e.message);
      });
  }

  async function loadTile(r, key, region, signal) {
    const res = await fetch(sliceUrl + '?region=' + encodeURIComponent(region), { signal });
    if (!res.ok) {
      const text = (await res.text()).trim();
      throw new Error('GET ' + region + ' of ' + displayName + ': HTTP ' + res.status + (text ? ': ' + text : ''));
    }
    const npy = parseNpy(await res.arrayBuffer());
    const w = r.x1 - r.x0, h = r.y1 - r.y0;
    const expected = [];
    for (let d = 0; d < state.rank; d++) expected.push(d === state.dimX ? w : d === state.dimY ? h : 1);
    if (npy.shape.join(',') !== expected.join(',')) {
      throw new Error('the server sent shape (' + npy.shape + ') for region ' + region + ', expected (' + expected + ')');
    }
    // Element strides of the region as sent (C or Fortran order).
    const strides = new Array(state.rank).fill(1);
    if (npy.fortranOrder) for (let d = 1; d < state.rank; d++) strides[d] = strides[d - 1] * expected[d - 1];
    else for (let d = state.rank - 2; d >= 0; d--) strides[d] = strides[d + 1] * expected[d + 1];
    const sx = state.dimX >= 0 ? strides[state.dimX] : 0, sy = state.dimY >= 0 ? strides[state.dimY] : 0;
    // The window in row-major (y, x) order, and the range of its finite values.
    const values = new Float64Array(w * h);
    let min = Infinity, max = -Infinity;
    for (let y = 0, k = 0; y < h; y++) {
      for (let x = 0; x < w; x++, k++) {
        const v = npy.values[y * sy + x * sx];
        values[k] = v;
        if (v < min) min = v;  // NaN compares false: skipped
        if (v > max) max = v;
      }
    }
    if (min === -Infinity || max === Infinity) {  // the range of the finite values only
      min = Infinity; max = -Infinity;
      for (const v of values) if (Number.isFinite(v)) { if (v < min) min = v; if (v > max) max = v; }
    }
    return { key, x0: r.x0, y0: r.y0, x1: r.x1, y1: r.y1, w, h, values, descr: npy.descr, min, max, image: null };
  }

  // ---- drawing ----

  function setRange(lo, hi) {
    if (!Number.isFinite(lo) || !Number.isFinite(hi)) { lo = 0; hi = 1; }  // no finite value shown
    state.vmin = lo;
    state.vmax = hi;
    $('vmin').value = formatValue(lo);
    $('vmax').value = formatValue(hi);
  }

  // The tile's values through the colour map into an image (an offscreen
  // canvas of one pixel per element). NaN is transparent.
  function renderTile(t) {
    const lut = state.lut;
    const img = new ImageData(t.w, t.h);
    const px = img.data;
    const lo = state.vmin, span = state.vmax - state.vmin;
    for (let k = 0; k < t.values.length; k++) {
      const v = t.values[k];
      if (v !== v) continue;  // NaN: left transparent
      let i;
      if (span > 0) i = clamp(Math.round((v - lo) / span * 255), 0, 255);
      else i = v < lo ? 0 : v > lo ? 255 : 128;
      px[k * 4] = lut[i * 4];
      px[k * 4 + 1] = lut[i * 4 + 1];
      px[k * 4 + 2] = lut[i * 4 + 2];
      px[k * 4 + 3] = 255;
    }
    const c = t.image || document.createElement('canvas');
    c.width = t.w;
    c.height = t.h;
    c.getContext('2d').putImageData(img, 0, 0);
    t.image = c;
    $('range').textContent = 'data shown: ' + formatValue(t.min) + ' \u2026 ' + formatValue(t.max) + ' (' + t.descr + ')';
  }

  // Resizes the canvas's backing store to its CSS size times the device pixel ratio.
  function sizeCanvas() {
    const dpr = window.devicePixelRatio || 1;
    const { w, h } = canvasSize();
    canvas.width = Math.max(1, Math.round(w * dpr));
    canvas.height = Math.max(1, Math.round(h * dpr));
  }

  function draw() {
    const dpr = window.devicePixelRatio || 1;
    const v = state.view;
    ctx.setTransform(dpr, 0, 0, dpr, 0, 0);
    ctx.clearRect(0, 0, canvas.width, canvas.height);
    const [ex, ey] = extents();
    // The slice's outline, so that an area not loaded yet shows where it is.
    ctx.fillStyle = '#505050';
    ctx.fillRect(-v.x0 * v.scale, -v.y0 * v.scale, ex * v.scale, ey * v.scale);
    const t = state.tile;
    if (t && t.image) {
      ctx.imageSmoothingEnabled = false;
      ctx.drawImage(t.image, (t.x0 - v.x0) * v.scale, (t.y0 - v.y0) * v.scale, t.w * v.scale, t.h * v.scale);
    }
    const rect = canvas.getBoundingClientRect();
    canvas.dataset.drawn = JSON.stringify({
      region: t ? [t.y0, t.y1, t.x0, t.x1] : null, x0: v.x0, y0: v.y0, scale: v.scale, left: rect.left, top: rect.top,
      dpr, vmin: state.vmin, vmax: state.vmax, cmap: state.cmap,
    });
  }

  function drawColorbar() {
    const bar = $('colorbar');
    const img = new ImageData(256, 1);
    img.data.set(state.lut);
    const c = bar.getContext('2d');
    bar.width = 256;
    bar.height = 1;
    c.putImageData(img, 0, 0);
  }

  // ---- controls ----

  function dimensionLabel(info, d) {
    const names = Array.isArray(info.dimension_names) ? info.dimension_names : [];
    const n = typeof names[d] === 'string' && names[d] !== '' ? names[d] : 'dim ' + d;
    return n + ' (' + state.shape[d] + ')';
  }

  function buildControls(info) {
    const cm = $('cmap');
    for (const name of Object.keys(COLORMAPS)) cm.add(new Option(name, name, false, name === state.cmap));
    cm.addEventListener('change', () => {
      state.cmap = cm.value;
      state.lut = makeLut(state.cmap);
      drawColorbar();
      redrawColours();
    });

    const onRange = () => {
      const lo = parseFloat($('vmin').value), hi = parseFloat($('vmax').value);
      if (!Number.isFinite(lo) || !Number.isFinite(hi)) return;
      state.auto = false;
      $('auto').checked = false;
      state.vmin = lo;
      state.vmax = hi;
      redrawColours();
    };
    $('vmin').addEventListener('change', onRange);
    $('vmax').addEventListener('change', onRange);
    $('auto').checked = state.auto;
    $('auto').addEventListener('change', () => {
      state.auto = $('auto').checked;
      if (state.auto && state.tile) setRange(state.tile.min, state.tile.max);
      redrawColours();
    });

    // The displayed dimensions (rank 2 and more), and a slider per other dimension.
    if (state.rank < 2) {
      $('axes').hidden = true;
    } else {
      for (const id of ['dim-y', 'dim-x']) {
        const sel = $(id);
        for (let d = 0; d < state.rank; d++) sel.add(new Option(dimensionLabel(info, d), String(d)));
        sel.addEventListener('change', () => {
          const picked = Number(sel.value);
          if (id === 'dim-y') {
            if (picked === state.dimX) state.dimX = state.dimY;
            state.dimY = picked;
          } else {
            if (picked === state.dimY) state.dimY = state.dimX;
            state.dimX = picked;
          }
          dimensionsChanged();
        });
      }
    }
    const box = $('indices');
    for (let d = 0; d < state.rank; d++) {
      const div = document.createElement('div');
      div.className = 'index';
      div.id = 'index-' + d;
      const label = document.createElement('div');
      label.textContent = dimensionLabel(info, d);
      const row = document.createElement('div');
      row.className = 'row';
      const slider = document.createElement('input');
      slider.type = 'range';
      const number = document.createElement('input');
      number.type = 'number';
      for (const input of [slider, number]) {
        input.min = '0';
        input.max = String(Math.max(0, state.shape[d] - 1));
        input.step = '1';
        input.value = String(state.index[d]);
        input.setAttribute('aria-label', 'index of ' + label.textContent);
        input.addEventListener('input', () => {
          const i = Math.round(Number(input.value));
          if (!Number.isFinite(i) || i < 0 || i >= state.shape[d]) return;
          state.index[d] = i;
          slider.value = number.value = String(i);
          updateUrl();
          scheduleFetch(0);
        });
      }
      row.append(slider, number);
      div.append(label, row);
      box.append(div);
    }
    if (state.rank === 0) $('slice-section').hidden = true;

    $('zoom-in').addEventListener('click', () => zoomCentre(2));
    $('zoom-out').addEventListener('click', () => zoomCentre(0.5));
    $('zoom-fit').addEventListener('click', () => { fitView(); viewChanged(); });
    $('zoom-one').addEventListener('click', () => zoomCentre(1 / state.view.scale));
    const step = () => Math.min(canvasSize().w, canvasSize().h) / 4;
    $('pan-left').addEventListener('click', () => pan(-step(), 0));
    $('pan-right').addEventListener('click', () => pan(step(), 0));
    $('pan-up').addEventListener('click', () => pan(0, -step()));
    $('pan-down').addEventListener('click', () => pan(0, step()));

    installPointer();
  }

  // The dimension selects and sliders after the displayed dimensions changed.
  function showDimensions() {
    if (state.rank >= 2) {
      $('dim-y').value = String(state.dimY);
      $('dim-x').value = String(state.dimX);
    }
    for (let d = 0; d < state.rank; d++) $('index-' + d).hidden = d === state.dimX || d === state.dimY;
    const fixed = state.rank - (state.dimX >= 0) - (state.dimY >= 0);
    if (fixed === 0 && state.rank < 2) $('slice-section').hidden = true;
  }

  function dimensionsChanged() {
    state.tile = null;  // another orientation: the old image does not fit
    showDimensions();
    fitView();
    updateUrl();
    viewChanged();
  }

  function redrawColours() {
    if (state.tile) renderTile(state.tile);
    draw();
    updateUrl();
  }

  // Mouse (and touch) drag to pan, wheel to zoom, keys when the canvas has focus.
  function installPointer() {
    let drag = null;
    canvas.addEventListener('pointerdown', (e) => {
      drag = { x: e.clientX, y: e.clientY };
      canvas.setPointerCapture(e.pointerId);
      canvas.classList.add('dragging');
    });
    canvas.addEventListener('pointermove', (e) => {
      if (drag) {
        pan(drag.x - e.clientX, drag.y - e.clientY);
        drag = { x: e.clientX, y: e.clientY };
      }
      showCursor(e);
    });
    const end = () => { drag = null; canvas.classList.remove('dragging'); };
    canvas.addEventListener('pointerup', end);
    canvas.addEventListener('pointercancel', end);
    canvas.addEventListener('wheel', (e) => {
      e.preventDefault();
      const rect = canvas.getBoundingClientRect();
      const delta = e.deltaMode === 1 ? e.deltaY * 20 : e.deltaY;  // lines -> pixels
      zoomAt(e.clientX - rect.left, e.clientY - rect.top, Math.pow(2, -delta / 300));
    }, { passive: false });
    canvas.addEventListener('keydown', (e) => {
      const keys = {
        ArrowLeft: () => pan(-40, 0), ArrowRight: () => pan(40, 0), ArrowUp: () => pan(0, -40), ArrowDown: () => pan(0, 40),
        '+': () => zoomCentre(1.5), '=': () => zoomCentre(1.5), '-': () => zoomCentre(1 / 1.5),
        0: () => { fitView(); viewChanged(); }, 1: () => zoomCentre(1 / state.view.scale),
      };
      if (keys[e.key]) { e.preventDefault(); keys[e.key](); }
    });
  }

  // The element under the pointer and its value (when loaded).
  function showCursor(e) {
    const rect = canvas.getBoundingClientRect();
    const v = state.view;
    const x = Math.floor(v.x0 + (e.clientX - rect.left) / v.scale);
    const y = Math.floor(v.y0 + (e.clientY - rect.top) / v.scale);
    const [ex, ey] = extents();
    if (x < 0 || y < 0 || x >= ex || y >= ey) { $('cursor').textContent = ''; return; }
    const at = state.index.slice();
    if (state.dimX >= 0) at[state.dimX] = x;
    if (state.dimY >= 0) at[state.dimY] = y;
    const t = state.tile;
    const loaded = t && t.key === sliceKey() && x >= t.x0 && x < t.x1 && y >= t.y0 && y < t.y1;
    $('cursor').textContent = '[' + at.join(', ') + '] = ' + (loaded ? formatValue(t.values[(y - t.y0) * t.w + (x - t.x0)]) : '(not loaded)');
  }

  // ---- URL state ----

  function readUrl() {
    const q = new URLSearchParams(location.search);
    if (q.has('cmap') && COLORMAPS[q.get('cmap')]) state.cmap = q.get('cmap');
    const lo = parseFloat(q.get('min')), hi = parseFloat(q.get('max'));
    if (Number.isFinite(lo) && Number.isFinite(hi)) { state.auto = false; state.vmin = lo; state.vmax = hi; }
    const dim = (name) => {
      const d = Number(q.get(name));
      return q.has(name) && Number.isInteger(d) && d >= 0 && d < state.rank ? d : null;
    };
    const y = dim('y'), x = dim('x');
    if (state.rank >= 2 && x !== null && y !== null && x !== y) { state.dimX = x; state.dimY = y; }
    if (q.has('at')) {
      q.get('at').split(',').forEach((s, d) => {
        const i = Number(s);
        if (d < state.rank && s !== '' && Number.isInteger(i) && i >= 0 && i < state.shape[d]) state.index[d] = i;
      });
    }
  }

  function updateUrl() {
    const q = new URLSearchParams();
    q.set('cmap', state.cmap);
    if (!state.auto) { q.set('min', String(state.vmin)); q.set('max', String(state.vmax)); }
    if (state.rank >= 2) { q.set('y', String(state.dimY)); q.set('x', String(state.dimX)); }
    if (state.rank > 2) q.set('at', state.index.join(','));
    history.replaceState(null, '', location.pathname + '?' + q.toString());
  }

  // ---- start ----

  async function start() {
    $('name').textContent = displayName;
    document.title = 'zarrcoro viewer: ' + displayName + ' (loading)';
    $('info-link').href = infoUrl;
    const slash = path.url.lastIndexOf('/');
    $('browse').href = '/' + (slash < 0 ? '' : path.url.slice(0, slash + 1));

    const res = await fetch(infoUrl);
    if (!res.ok) {
      const text = (await res.text()).trim();
      throw new Error('no array at ' + displayName + ': HTTP ' + res.status + (text ? ': ' + text : ''));
    }
    const info = await res.json();
    if (info.node_type !== 'array' || !Array.isArray(info.shape)) throw new Error(displayName + ' is not an array');
    state.shape = info.shape.map(Number);
    state.rank = state.shape.length;
    state.dtype = String(info.data_type ?? info.dtype);  // a v2 dtype with no v3 name has no data_type
    const chunks = Array.isArray(info.chunk_shape) ? ', chunks ' + info.chunk_shape.join(' \u00d7 ') : '';
    $('summary').textContent = (state.rank ? state.shape.join(' \u00d7 ') : 'scalar') + ' ' + state.dtype + chunks +
      ', Zarr v' + info.zarr_format;
    if (!NUMERIC.has(state.dtype)) {
      throw new Error(displayName + ' has data type ' + state.dtype + ', which is not numeric: the viewer draws ' +
        'numeric arrays only (bool, integers, floats)');
    }
    state.index = new Array(state.rank).fill(0);
    state.dimX = state.rank - 1;  // the last two dimensions by default
    state.dimY = state.rank - 2 >= 0 ? state.rank - 2 : -1;
    readUrl();
    state.lut = makeLut(state.cmap);
    buildControls(info);
    if (!state.auto) setRange(state.vmin, state.vmax);  // fixed by the URL
    showDimensions();
    drawColorbar();
    sizeCanvas();
    fitView();
    draw();
    if (state.shape.some((n) => n === 0)) {
      $('status').textContent = 'the array is empty: nothing to draw';
      document.title = 'ok ' + displayName + ' (empty)';
      return;
    }
    state.ready = true;
    updateUrl();
    new ResizeObserver(() => { sizeCanvas(); draw(); scheduleFetch(); }).observe($('stage'));
    fetchVisible();
  }

  start().catch((e) => {
    // Nothing to control: only the message (and the status) stay.
    for (const id of ['slice-section', 'colour-section', 'view-section']) $(id).hidden = true;
    showError(e.message);
  });
})();
