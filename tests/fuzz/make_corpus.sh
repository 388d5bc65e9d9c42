#!/usr/bin/env bash
# Regenerates the seed corpus tests/fuzz/corpus/<target>/ from the shared
# fixtures and cases (../shared/fixtures, ../shared/cases: metadata
# documents, stored chunks, .npy files) and from chunks, shards and
# documents built here with Debian's numcodecs (python3-numcodecs) to match
# the fixed codec chains of fuzz_codec_decode and fuzz_sharding.
#   tests/fuzz/make_corpus.sh [SHARED_DIR]
# The selector bytes below must follow the tables in fuzz_codec_decode.cpp,
# fuzz_sharding.cpp and fuzz_fill_value.cpp.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
shared="${1:-$here/../../../shared}"
[ -d "$shared/fixtures" ] || { echo "make_corpus: no fixtures at $shared" >&2; exit 2; }
rm -rf "$here/corpus"
exec /usr/bin/python3 - "$here/corpus" "$shared" <<'PY'
import gzip, hashlib, json, os, re, struct, sys, zlib
import numpy as np
from numcodecs import LZ4, Blosc, Zstd

out_root, shared = sys.argv[1], sys.argv[2]
MAX_FILE = 8 << 10

def put(target, name, data):
    if isinstance(data, str):
        data = data.encode()
    if len(data) > MAX_FILE:
        return
    d = os.path.join(out_root, target)
    os.makedirs(d, exist_ok=True)
    name = re.sub(r'[^A-Za-z0-9_.-]+', '_', name).strip('_')[:80] or 'seed'
    path = os.path.join(d, name)
    n = 2
    while os.path.exists(path):
        if open(path, 'rb').read() == data:
            return
        path = os.path.join(d, f'{name}_{n}'); n += 1
    with open(path, 'wb') as f:
        f.write(data)

def rel(p):
    return os.path.relpath(p, shared).replace('fixtures/', '').replace('/', '_')

def minify(text):
    try:
        return json.dumps(json.loads(text), separators=(',', ':'), ensure_ascii=False)
    except ValueError:
        return text

# ---- documents from the fixtures and cases ----
docs = {'zarr.json': [], '.zarray': [], '.zgroup': []}
for top in ('cases', 'fixtures'):
    for root, dirs, files in sorted(os.walk(os.path.join(shared, top))):
        dirs.sort()
        if 'expected' in root.split(os.sep):
            continue
        for f in files:
            if f in docs:
                docs[f].append(os.path.join(root, f))

seen = set()
def once(kind, text):
    h = hashlib.sha1((kind + text).encode()).hexdigest()
    if h in seen:
        return False
    seen.add(h)
    return True

fills, types_v3, types_v2 = [], [], []
for p in docs['zarr.json']:
    text = minify(open(p, encoding='utf-8', errors='replace').read())
    if once('v3', text):
        put('fuzz_metadata_v3', rel(os.path.dirname(p)), text)
    try:
        j = json.loads(text)
    except ValueError:
        continue
    if isinstance(j, dict) and j.get('node_type') == 'array':
        fills.append((j.get('data_type'), j.get('fill_value')))
        types_v3.append(j.get('data_type'))
for p in docs['.zarray']:
    text = minify(open(p, encoding='utf-8', errors='replace').read())
    attrs = os.path.join(os.path.dirname(p), '.zattrs')
    seed = text + ('\0' + minify(open(attrs).read()) if os.path.exists(attrs) else '')
    if once('v2', seed):
        put('fuzz_metadata_v2', rel(os.path.dirname(p)), seed)
    try:
        types_v2.append(json.loads(text).get('dtype'))
    except ValueError:
        pass
for p in docs['.zgroup'][:2]:
    put('fuzz_metadata_v2', 'zgroup_' + rel(os.path.dirname(p)), open(p).read() + '\0{"a":[1,{"b":null}]}')
put('fuzz_metadata_v3', 'group_attrs', '{"zarr_format":3,"node_type":"group","attributes":{"x":[1,2.5,"NaN"],"y":{"z":null}}}')
put('fuzz_metadata_v3', 'group_mu_false', '{"zarr_format":3,"node_type":"group","ext":{"must_understand":false}}')

# ---- consolidated metadata: a v3 group with an inline copy; a v2 .zmetadata ----
put('fuzz_consolidated', 'v3_inline', '{"zarr_format": 3, "node_type": "group", "attributes": {}, "consolidated_metadata": {"kind": "inline", "must_understand": false, "metadata": {"a": {"zarr_format": 3, "node_type": "array", "shape": [4], "data_type": "float64", "chunk_grid": {"name": "regular", "configuration": {"chunk_shape": [2]}}, "chunk_key_encoding": {"name": "default"}, "fill_value": "NaN", "codecs": [{"name": "bytes", "configuration": {"endian": "little"}}]}, "g": {"zarr_format": 3, "node_type": "group", "attributes": {"k": 1}, "consolidated_metadata": {"kind": "inline", "must_understand": false, "metadata": {}}}, "g/b": {"zarr_format": 2, "shape": [3], "chunks": [2], "dtype": "<i2", "compressor": null, "fill_value": 0, "filters": null, "order": "C", "attributes": {}}}}}')
put('fuzz_consolidated', 'v2_zmetadata', '{"zarr_consolidated_format": 1, "metadata": {".zgroup": {"zarr_format": 2}, ".zattrs": {"t": "x"}, "a/.zarray": {"zarr_format": 2, "shape": [3], "chunks": [2], "dtype": "<f4", "compressor": null, "fill_value": "NaN", "filters": null, "order": "C"}, "a/.zattrs": {"u": 1}, "g/.zgroup": {"zarr_format": 2}, "g/h/.zarray": {"zarr_format": 2, "shape": [2], "chunks": [2], "dtype": "|u1", "compressor": {"id": "zlib", "level": 1}, "fill_value": null, "filters": null, "order": "F"}}}')

# ---- end to end: a document and its first chunk ----
def first_chunk_v3(d, j):
    rank = len(j.get('shape', []))
    enc = j.get('chunk_key_encoding', {}) or {}
    sep = (enc.get('configuration') or {}).get('separator', '/' if enc.get('name') != 'v2' else '.')
    if enc.get('name') == 'v2':
        key = sep.join(['0'] * rank) if rank else '0'
    else:
        key = sep.join(['c'] + ['0'] * rank)
    return os.path.join(d, *key.split('/'))

for p in docs['zarr.json']:
    try:
        j = json.loads(open(p).read())
    except ValueError:
        continue
    if not isinstance(j, dict) or j.get('node_type') != 'array':
        continue
    c = first_chunk_v3(os.path.dirname(p), j)
    doc = minify(open(p).read()).encode()
    if os.path.isfile(c) and len(doc) + os.path.getsize(c) < MAX_FILE:
        put('fuzz_array_read', rel(os.path.dirname(p)), doc + b'\0' + open(c, 'rb').read())
    else:
        put('fuzz_array_read', rel(os.path.dirname(p)) + '_nochunk', doc)
n_v2 = 0
for p in docs['.zarray']:
    try:
        j = json.loads(open(p).read())
    except ValueError:
        continue
    rank = len(j.get('shape', []))
    sep = j.get('dimension_separator', '.') or '.'
    key = sep.join(['0'] * rank) if rank else '0'
    c = os.path.join(os.path.dirname(p), *key.split('/'))
    doc = b'2' + minify(open(p).read()).encode()
    if os.path.isfile(c) and len(doc) + os.path.getsize(c) < MAX_FILE and n_v2 < 60:
        put('fuzz_array_read', 'v2_' + rel(os.path.dirname(p)), doc + b'\0' + open(c, 'rb').read())
        n_v2 += 1

# Variable-length strings and bytes (v3 vlen-utf8, v2 "|O" vlen-bytes), written here by hand.
put('fuzz_array_read', 'strings_v3_vlen_utf8',
    b'{"zarr_format":3,"node_type":"array","shape":[3],"data_type":"string","chunk_grid":{"name":"regular",'
    b'"configuration":{"chunk_shape":[3]}},"chunk_key_encoding":{"name":"default"},"fill_value":"f",'
    b'"codecs":[{"name":"vlen-utf8"}]}\0' + bytes.fromhex('03000000 01000000 61 00000000 02000000 c3a9'))
put('fuzz_array_read', 'strings_v2_vlen_bytes',
    b'2{"zarr_format":2,"shape":[2],"chunks":[2],"dtype":"|O","compressor":null,"fill_value":null,'
    b'"order":"C","filters":[{"id":"vlen-bytes"}]}\0' + bytes.fromhex('02000000 02000000 00ff 00000000'))

# ---- fill values and data types (fuzz_fill_value selectors) ----
CORE = ['bool', 'int8', 'int16', 'int32', 'int64', 'uint8', 'uint16', 'uint32', 'uint64',
        'float16', 'float32', 'float64', 'complex64', 'complex128']
SEL_S5, SEL_U3, SEL_STRUCT, SEL_V3TYPE, SEL_V2TYPE = 14, 15, 16, 17, 18
def fill_seed(sel, value, name):
    put('fuzz_fill_value', f'{sel:02d}_{name}', bytes([sel]) + json.dumps(value).encode())
for dt, fv in fills:
    if isinstance(dt, str) and dt in CORE:
        fill_seed(CORE.index(dt), fv, dt + '_' + hashlib.sha1(json.dumps(fv).encode()).hexdigest()[:6])
for i, name in enumerate(CORE):
    for v in (0, 1, -1, 255, 2.5, 'NaN', 'Infinity', '-Infinity', '0x7fc00001', [1.0, 'NaN'], True, 18446744073709551615):
        fill_seed(i, v, name + '_' + re.sub(r'\W', '', json.dumps(v))[:12])
for v in ('', 'AAAAAAA=', 'aGVsbG8=', [104, 105], 0):
    fill_seed(SEL_S5, v, 'S5_' + hashlib.sha1(json.dumps(v).encode()).hexdigest()[:6])
for v in ('', 'abc', 'é☃𝄞', 'AAAAAAAAAAAAAAAA', 0):
    fill_seed(SEL_U3, v, 'U3_' + hashlib.sha1(json.dumps(v).encode()).hexdigest()[:6])
for v in ({'a': 1, 'f': 'NaN', 's': 'YWI=', 'z': [[1, 2], [3, 4]]}, 'AAAAAAAAAAAAAAAAAAAAAA==', 0, None):
    fill_seed(SEL_STRUCT, v, 'struct_' + hashlib.sha1(json.dumps(v).encode()).hexdigest()[:6])
for t in types_v3 + [
        {'name': 'struct', 'configuration': {'fields': [{'name': 'flux', 'data_type': 'float32'},
                                                        {'name': 'mask', 'data_type': 'int32'}]}},
        {'name': 'null_terminated_bytes', 'configuration': {'length_bytes': 4}},
        {'name': 'fixed_length_utf32', 'configuration': {'length_bytes': 8}}]:
    fill_seed(SEL_V3TYPE, t, 'v3type_' + hashlib.sha1(json.dumps(t).encode()).hexdigest()[:6])
for t in types_v2 + ['<i4', '>f8', '|b1', '|S5', '<U4', '=u2',
                     [['a', '|S3'], ['n', '<i2'], ['u', '<U2'], ['b', '|S2']],
                     [['z', '<i2', [2, 2]], ['nested', [['x', '|u1'], ['y', '>f8', [3]]]]]]:
    fill_seed(SEL_V2TYPE, t, 'v2type_' + hashlib.sha1(json.dumps(t).encode()).hexdigest()[:6])

# ---- stored chunks for the fixed chains of fuzz_codec_decode ----
CRC_TABLE = []
for i in range(256):
    c = i
    for _ in range(8):
        c = (c >> 1) ^ 0x82F63B78 if c & 1 else c >> 1
    CRC_TABLE.append(c)
def crc32c(b):
    c = 0xFFFFFFFF
    for x in b:
        c = CRC_TABLE[(c ^ x) & 0xFF] ^ (c >> 8)
    return c ^ 0xFFFFFFFF
def with_crc(b):
    return b + struct.pack('<I', crc32c(b))
def gz(b, level):
    return gzip.compress(b, compresslevel=level, mtime=0)
def zstd(b, level=1):
    return Zstd(level=level).encode(b)

def arr(dtype, shape, kind):
    n = int(np.prod(shape)) if shape else 1
    if kind == 'ramp':
        a = np.arange(n)
    elif kind == 'const':
        a = np.full(n, 3)
    else:
        a = np.random.default_rng(n).integers(0, 200, n)
    return a.astype(dtype).reshape(shape)

rec = np.dtype([('a', '>i2'), ('u', '>U2'), ('c', '>c8', (2,))])
def records(kind):
    a = np.zeros(6, dtype=rec)
    a['a'] = np.arange(6) if kind != 'const' else 3
    a['u'] = ['ab', 'c', '', 'zz', 'é', 'q'] if kind != 'const' else 'x'
    a['c'] = np.arange(12).reshape(6, 2) * (1 + 1j)
    return a.reshape(3, 2)

def blosc(cname, clevel, shuffle):
    return lambda a: Blosc(cname=cname, clevel=clevel, shuffle=shuffle, blocksize=0).encode(np.ascontiguousarray(a))

chains = [  # (name, encode(kind) -> stored bytes); index = selector
    ('bytes', lambda k: arr('<i4', (8, 8), k).tobytes()),
    ('bytes_big', lambda k: arr('>f8', (4, 5), k).tobytes()),
    ('bytes_struct', lambda k: records(k).tobytes()),
    ('gzip', lambda k: gz(arr('<u2', (16, 16), k).tobytes(), 5)),
    ('zstd_checksum', lambda k: zstd(arr('<i4', (10, 10), k).tobytes(), 3)),
    ('zstd_big', lambda k: zstd(arr('>c16', (3, 3), k).tobytes(), 0)),
    ('crc32c', lambda k: with_crc(arr('u1', (7, 9), k).tobytes())),
    ('blosc_lz4', lambda k: blosc('lz4', 5, Blosc.SHUFFLE)(arr('<f4', (16, 16), k))),
    ('blosc_zstd_bit', lambda k: blosc('zstd', 3, Blosc.BITSHUFFLE)(arr('<i2', (33,), k))),
    ('transpose', lambda k: np.ascontiguousarray(arr('<i2', (5, 7), k).T).tobytes()),
    ('transpose3_gzip_crc', lambda k: with_crc(gz(np.ascontiguousarray(arr('>u4', (2, 3, 4), k).transpose(2, 0, 1)).tobytes(), 1))),
    ('v2_zlib', lambda k: zlib.compress(arr('<i4', (8, 8), k).tobytes(), 1)),
    ('v2_gzip', lambda k: gz(arr('>f4', (12,), k).tobytes(), 1)),
    ('v2_lz4', lambda k: LZ4(acceleration=1).encode(arr('u1', (64,), k).tobytes())),
    ('v2_zstd', lambda k: zstd(arr('<i8', (6, 6), k).tobytes(), 1)),
    ('v2_blosc', lambda k: blosc('blosclz', 5, Blosc.SHUFFLE)(arr('<u2', (40,), k))),
    ('v2_lz4_zlib', lambda k: zlib.compress(LZ4().encode(np.array([b'abc', b'', b'12345678', b'x', b'yy'], dtype='S8').tobytes()), 1)),
    ('zstd_0d', lambda k: zstd(np.array(1.5 if k != 'const' else 3, dtype='<f2').tobytes(), 1)),
]
for sel, (name, enc) in enumerate(chains):
    for kind in ('ramp', 'const', 'random'):
        put('fuzz_codec_decode', f'{sel:02d}_{name}_{kind}', bytes([sel]) + enc(kind))
    put('fuzz_codec_decode', f'{sel:02d}_{name}_roundtrip', bytes([sel | 0x80]) + bytes(range(0, 256, 7)))
# Raw streams from the numcodecs test suite, for the chains of their codec.
for codec, sel, limit in (('blosc', 7, 6), ('zstd', 4, 4), ('zlib', 11, 4), ('gzip', 3, 4), ('lz4', 13, 4), ('crc32c', 6, 3)):
    d = os.path.join(shared, 'fixtures', 'numcodecs', 'fixture', codec)
    if not os.path.isdir(d):
        continue
    picked = 0
    for root, _, files in sorted(os.walk(d)):
        for f in sorted(files):
            p = os.path.join(root, f)
            if not f.startswith('encoded.') or os.path.getsize(p) > 2048 or picked >= limit:
                continue
            put('fuzz_codec_decode', f'{sel:02d}_numcodecs_{rel(p)}', bytes([sel]) + open(p, 'rb').read())
            picked += 1

# ---- shards for the fixed configurations of fuzz_sharding ----
MISSING = 0xFFFFFFFFFFFFFFFF
def shard(chunks, index_at_start, index_codec):
    """chunks: encoded inner chunks in C order (None = missing)."""
    n = len(chunks)
    index_size = len(index_codec([0] * (2 * n)))
    entries, body = [], b''
    base = index_size if index_at_start else 0
    for c in chunks:
        if c is None:
            entries += [MISSING, MISSING]
        else:
            entries += [base + len(body), len(c)]
            body += c
    index = index_codec(entries)
    return index + body if index_at_start else body + index
def idx_crc(entries, fmt='<'):
    return with_crc(struct.pack(fmt + f'{len(entries)}Q', *entries))
def idx_plain(entries):
    return struct.pack(f'<{len(entries)}Q', *entries)
def blocks(a, cs):
    out = []
    for idx in np.ndindex(*[a.shape[d] // cs[d] for d in range(a.ndim)]):
        sl = tuple(slice(i * c, (i + 1) * c) for i, c in zip(idx, cs))
        out.append(np.ascontiguousarray(a[sl]))
    return out
def variants(encoded):
    yield 'full', encoded
    yield 'holes', [c if i % 2 == 0 else None for i, c in enumerate(encoded)]
    yield 'empty', [None] * len(encoded)

configs = [
    lambda k: (blocks(arr('<u2', (4, 4), k), (2, 2)), lambda c: c.tobytes(), False, idx_crc),
    lambda k: (blocks(arr('<i4', (6, 4), k), (3, 2)), lambda c: gz(c.tobytes(), 1), True, idx_plain),
    lambda k: (blocks(arr('<u2', (4, 4), k), (2, 2)),
               lambda c: shard([x.astype('>u2').tobytes() for x in blocks(c, (1, 1))], False, idx_crc), False, idx_crc),
    lambda k: (blocks(arr('<f4', (6, 4), k), (3, 2)), lambda c: zstd(np.ascontiguousarray(c.T).astype('>f4').tobytes()), True, idx_crc),
    lambda k: (blocks(arr('u1', (16,), k), (4,)), lambda c: with_crc(c.tobytes()), False, lambda e: idx_crc(e, '>')),
]
for sel, cfg in enumerate(configs):
    for kind in ('ramp', 'random'):
        chunks, enc, at_start, index_codec = cfg(kind)
        for vname, encs in variants([enc(c) for c in chunks]):
            put('fuzz_sharding', f'{sel}_{kind}_{vname}', bytes([sel]) + shard(encs, at_start, index_codec))
# A few real shards from the fixtures (other layouts: they exercise the index checks).
for p in [p for p in docs['zarr.json'] if 'shard' in p][:4]:
    d = os.path.dirname(p)
    for root, _, files in os.walk(os.path.join(d, 'c')):
        for f in sorted(files)[:1]:
            put('fuzz_sharding', 'fixture_' + rel(os.path.join(root, f)), b'\0' + open(os.path.join(root, f), 'rb').read())

# ---- regions ----
for s in ('4,6\n0:5,0:6', '4,6\n18446744073709551615,0:6', '4,6\n0:18446744073709551616,0:6', '4,6\n-1:4,0:6',
          '4,6\n3:1,0:6', '4,6\n,0:2', '4,6\n,', '4,6\n1', '\n', '\n:', '10,20,30\n1:2,:,5:', '18446744073709551615,3\n:,1:',
          '4294967296,4294967296,4294967296\n', '5\n 1 : 3 ', '3,3\n0:1,0:1,0:1', '7\n+1:2'):
    put('fuzz_region', hashlib.sha1(s.encode()).hexdigest()[:10], s)

# ---- .npy files ----
npys = []
for root, _, files in sorted(os.walk(os.path.join(shared, 'fixtures'))):
    for f in sorted(files):
        if f.endswith('.npy') and os.path.getsize(os.path.join(root, f)) <= 2048:
            npys.append(os.path.join(root, f))
for p in npys[:40]:
    put('fuzz_npy', rel(p), open(p, 'rb').read())
def npy(a, version=(1, 0)):
    import io
    from numpy.lib import format as fmt
    b = io.BytesIO()
    fmt.write_array(b, a, version=version, allow_pickle=False)
    return b.getvalue()
put('fuzz_npy', 'struct_strings', npy(np.zeros(2, dtype=[('a', '|S3'), ('n', '<i2'), ('u', '<U2'), ('b', '|S2')])))
put('fuzz_npy', 'nested_subarray', npy(np.zeros(2, dtype=[('z', '<i2', (2, 2)), ('s', [('x', 'u1'), ('y', '>f8', (3,))])])))
put('fuzz_npy', 'fortran_v2', npy(np.asfortranarray(np.arange(6, dtype='>i4').reshape(2, 3)), (2, 0)))
put('fuzz_npy', 'v3_utf8_name', npy(np.zeros(1, dtype=[('é☃', '<f2')]), (3, 0)))
put('fuzz_npy', 'zero_d', npy(np.array(3.5, dtype='<c8')))
put('fuzz_npy', 'empty', npy(np.zeros((0, 3), dtype='|b1')))
for d in ("'<i4'", "'|S4'", "'<U2'", "[('a', '|S3'), ('n', '<i2'), ('u', '<U2'), ('b', '|S2')]",
          "[('z', '<i2', (2, 2)), ('s', [('x', '|u1'), ('y', '<f8', (3,))])]", "'>c16'", "[('\\xe9', '=f2')]"):
    put('fuzz_npy', 'descr_' + hashlib.sha1(d.encode()).hexdigest()[:8], d)

# ---- HTTP answers (status, range, Content-Range, body) ----
for s in ('206\n0 10\nbytes 0-9/100\n0123456789', '206\n90 20\nbytes 90-99/100\n0123456789',
          '206\n-10\nbytes 90-99/100\n0123456789', '206\n-10\nbytes 0-9/*\n0123456789',
          '200\n5 3\n\n0123456789', '200\nfull\n\n0123456789', '416\n200 1\nbytes */100\n',
          '206\nfull\nbytes 0-0/1\nx', '206\n0 18446744073709551615\nbytes 0-3/18446744073709551615\nabcd',
          '206\n18446744073709551615 1\nbytes 18446744073709551615-18446744073709551615/*\nz',
          '206\n0 1\nbytes 0-0\nx', '404\n0 1\n\n<Error/>', '206\n-5\nbytes 3-1/4\n'):
    put('fuzz_http_response', hashlib.sha1(s.encode()).hexdigest()[:10], s)

# ---- HTTP content codings (status, Content-Encoding, limit, body) ----
text = b'{"zarr_format": 3, "node_type": "array"}' * 4
gz = lambda b: gzip.compress(b, mtime=0)
deflater = zlib.compressobj(wbits=-15)
raw = deflater.compress(text) + deflater.flush()
for name, head, body in (
    ('gzip', b'200\ngzip\n4096\n', gz(text)),
    ('gzip_twice', b'200\ngzip, gzip\n4096\n', gz(gz(text))),
    ('gzip_members', b'200\nx-gzip\n4096\n', gz(text) + gz(b'tail')),
    ('zlib', b'200\nDeflate\n4096\n', zlib.compress(text)),
    ('raw_deflate', b'200\ndeflate\n4096\n', raw),
    ('over_limit', b'200\ngzip\n100\n', gz(text)),
    ('cut_short', b'200\ngzip\n4096\n', gz(text)[:-9]),
    ('trailing', b'200\ndeflate\n4096\n', zlib.compress(text) + b'xx'),
    ('range', b'206\ngzip\n4096\n', gz(text)),
    ('error_answer', b'503\ngzip\n4096\n', b'<Error>not gzip</Error>'),
    ('unsupported', b'200\nidentity, br\n4096\n', text),
    ('identity', b'200\n identity \n10\n', text),
):
    put('fuzz_http_coding', name, head + body)

# ---- S3 XML bodies ----
for name, s in (
    ('list', '<?xml version="1.0" encoding="UTF-8"?><ListBucketResult xmlns="http://s3.amazonaws.com/doc/2006-03-01/">'
             '<Name>b</Name><Prefix>p/</Prefix><KeyCount>2</KeyCount><MaxKeys>1000</MaxKeys><IsTruncated>true</IsTruncated>'
             '<Contents><Key>p/a&amp;b/zarr.json</Key><Size>12</Size><ETag>&quot;x&quot;</ETag></Contents>'
             '<Contents><Key>p/c/0/&#x1F600;&#10;</Key></Contents><CommonPrefixes><Prefix>p/d/</Prefix></CommonPrefixes>'
             '<NextContinuationToken>1ueGcxLPRx1Tr/XYExHnhbYLgveDs2J/wm36Hy4vbOwM=</NextContinuationToken></ListBucketResult>'),
    ('list_empty', '<ListBucketResult><IsTruncated>false</IsTruncated><Contents/><CommonPrefixes/></ListBucketResult>'),
    ('error', '<?xml version="1.0" encoding="UTF-8"?><Error><Code>NoSuchKey</Code><Message>The resource &lt;you&gt; requested does not exist.</Message>'
              '<Resource>/b/k</Resource><RequestId>4442587FB7D0A2F9</RequestId></Error>'),
    ('delete', '<DeleteResult><Deleted><Key>a</Key></Deleted><Error><Key>b&#0;</Key><Code>AccessDenied</Code><Message>no</Message></Error></DeleteResult>'),
    ('entities', '&#1114111;&#1114112;&#xD800;&#x;&#;&amp&unknown;&#65;&#x41;'),
):
    put('fuzz_s3_xml', name, s)

# ---- example server: value size, Range header, request target ----
for s in ('100\nbytes=0-9\n/a/zarr.json', '100\nbytes=-5\n/a/c/0/0?x=1', '100\nbytes=90-\n/slice/a?region=0:2,1&format=npy',
          '0\nbytes=0-0\n/', '100\nbytes=5-2\n/%41%2Fb', '18446744073709551615\nbytes=18446744073709551614-\n/a%00',
          '10\nitems=0-1\n*', '10\nbytes=0-1,3-4\nhttp://h/a', '10\nbytes = 1 - 2 \n/a?b=%zz&c', '10\nbytes=-0\n/?&&=&'):
    put('fuzz_server_http', hashlib.sha1(s.encode()).hexdigest()[:10], s)

total = 0
for root, _, files in os.walk(out_root):
    for f in files:
        total += os.path.getsize(os.path.join(root, f))
for t in sorted(os.listdir(out_root)):
    print(f'{t}: {len(os.listdir(os.path.join(out_root, t)))} files')
print(f'total {total} bytes')
PY
