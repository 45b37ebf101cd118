"""Print the SASS instructions with the most warp-stall samples from `ncu --page source --csv` output."""
import csv, sys, collections
rows = list(csv.reader(open(sys.argv[1])))
hdr_i = next(i for i, r in enumerate(rows) if any("Source" == c or c.startswith("Source") for c in r))
hdr = rows[hdr_i]; data = rows[hdr_i + 1:]
print(hdr)
col = next(i for i, c in enumerate(hdr) if "Warp Stall Sampling (All" in c)
src = next(i for i, c in enumerate(hdr) if c.startswith("Source"))
adr = next((i for i, c in enumerate(hdr) if c.startswith("Address")), None)
def num(x):
    try: return float(x.replace(",", ""))
    except Exception: return 0.0
tot = sum(num(r[col]) for r in data if len(r) > col)
print("total samples", tot)
ops = collections.Counter()
for r in data:
    if len(r) > col:
        toks = [t for t in r[src].split() if not t.startswith("@")]  # drop the predicate (@P0, @!UP1, ...)
        ops[toks[0].split(".")[0] if toks else ""] += num(r[col])
print("by opcode:", [(k, round(v / tot, 3)) for k, v in ops.most_common(15)])
for r in sorted(data, key=lambda r: -num(r[col]) if len(r) > col else 0)[:45]:
    print(f"{num(r[col]) / tot:6.3f}", r[adr] if adr is not None else "", r[src][:90])
