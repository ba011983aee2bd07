"""Problems for the ``builtin`` task set (third batch): the same shape as ``_FIRST`` in
``registry/builtin_source.py`` — prompt, reference solution, public and hidden *inputs*; the expected
outputs come from running the references. Tasks whose right answer is not unique carry a
``checker``: a special judge that reads ``{"cases": [...]}`` as JSON on stdin and prints one line
per case, 1 (accepted) or 0."""

from __future__ import annotations

from typing import Any

# ----------------------------------------------------------------------------- special judges

# builtin/word-segmentation (function): any split into dictionary words, or None when none exists.
_SEGMENT_CHECKER = r"""
import json, sys

def possible(s, words):
    vocab = set(words)
    longest = max((len(w) for w in vocab), default=0)
    ok = [True] + [False] * len(s)
    for i in range(1, len(s) + 1):
        ok[i] = any(ok[j] and s[j:i] in vocab for j in range(max(0, i - longest), i))
    return ok[len(s)]

def judge(case):
    s, words = case['args']
    out = case['output']
    if out is None:
        return not possible(s, words)
    vocab = set(words)
    return (isinstance(out, list) and all(isinstance(w, str) and w in vocab for w in out)
            and ''.join(out) == s)

for case in json.load(sys.stdin)['cases']:
    try:
        good = judge(case)
    except Exception:
        good = False
    print(1 if good else 0)
"""

# The end of every stdio checker: one verdict per case; an output it cannot even parse is wrong.
_STDIO_VERDICTS = r"""
for case in json.load(sys.stdin)['cases']:
    try:
        good = judge(case['stdin'], case['output'])
    except Exception:
        good = False
    print(1 if good else 0)
"""

# builtin/cheapest-route (stdio): the right distance and any path that achieves it.
_ROUTE_CHECKER = r"""
import heapq, json, sys

def judge(stdin, output):
    data = stdin.split()
    n, m = int(data[0]), int(data[1])
    best = {}
    adj = [[] for _ in range(n + 1)]
    for i in range(m):
        u, v, w = int(data[2 + 3 * i]), int(data[3 + 3 * i]), int(data[4 + 3 * i])
        adj[u].append((v, w))
        adj[v].append((u, w))
        key = (min(u, v), max(u, v))
        best[key] = min(best.get(key, w), w)
    dist = [None] * (n + 1)
    dist[1] = 0
    heap = [(0, 1)]
    while heap:
        d, u = heapq.heappop(heap)
        if d > dist[u]:
            continue
        for v, w in adj[u]:
            if dist[v] is None or d + w < dist[v]:
                dist[v] = d + w
                heapq.heappush(heap, (d + w, v))
    toks = output.split()
    if dist[n] is None:
        return toks == ['-1']
    if len(toks) < 2 or not toks[0].lstrip('-').isdigit() or int(toks[0]) != dist[n]:
        return False
    path = [int(t) for t in toks[1:]]
    if path[0] != 1 or path[-1] != n:
        return False
    total = 0
    for a, b in zip(path, path[1:]):
        key = (min(a, b), max(a, b))
        if key not in best:
            return False
        total += best[key]
    return total == dist[n]
""" + _STDIO_VERDICTS

# builtin/equal-split (stdio): NO exactly when no split exists, else any valid group of indices.
_SPLIT_CHECKER = r"""
import json, sys

def judge(stdin, output):
    data = stdin.split()
    n = int(data[0])
    a = [int(x) for x in data[1:1 + n]]
    total = sum(a)
    feasible = False
    if total % 2 == 0:
        half = total // 2
        reach = 1
        mask = (1 << (half + 1)) - 1
        for x in a:
            reach = (reach | (reach << x)) & mask
        feasible = bool((reach >> half) & 1)
    toks = output.split()
    if not feasible:
        return toks == ['NO']
    if len(toks) < 2 or toks[0] != 'YES':
        return False
    idx = [int(t) for t in toks[1:]]
    if any(i < 1 or i > n for i in idx) or any(x >= y for x, y in zip(idx, idx[1:])):
        return False
    return 2 * sum(a[i - 1] for i in idx) == total
""" + _STDIO_VERDICTS

# A valid completed sudoku grid (rows shift by 3, bands by 1), used to build test boards.
_SOLVED = ["".join(str((r * 3 + r // 3 + c) % 9 + 1) for c in range(9)) for r in range(9)]

TASKS: list[dict[str, Any]] = [
    # ------------------------------------------------------------------------- difficulty 1
    {
        "id": "builtin/dedupe-keep-order", "kind": "function", "difficulty": 1, "tags": ["lists", "hashing"],
        "entry_point": "dedupe",
        "prompt": "Write `dedupe(items: list[int]) -> list[int]` returning `items` with every repeated value "
                  "removed: each value is kept only at its first occurrence, and the kept values stay in "
                  "their original order.",
        "reference": r"""def dedupe(items):
    seen = set()
    out = []
    for x in items:
        if x not in seen:
            seen.add(x)
            out.append(x)
    return out
""",
        "public": [[[1, 2, 1, 3, 2]], [[]], [[5, 5, 5]]],
        "hidden": [[[-1, 1, -1, 0]], [[7]], [[i % 37 for i in range(1000)]], [[3, 2, 1, 2, 3]],
                   [list(range(50, 0, -1)) * 2]],
    },
    {
        "id": "builtin/chunk-list", "kind": "function", "difficulty": 1, "tags": ["lists"],
        "entry_point": "chunk",
        "prompt": "Write `chunk(items: list[int], size: int) -> list[list[int]]` that cuts `items` into "
                  "consecutive pieces of `size` elements (size >= 1), in order; only the last piece may be "
                  "shorter. An empty list gives [].",
        "reference": r"""def chunk(items, size):
    return [items[i:i + size] for i in range(0, len(items), size)]
""",
        "public": [[[1, 2, 3, 4, 5], 2], [[], 3], [[1, 2, 3], 3]],
        "hidden": [[[1, 2, 3], 1], [[1, 2, 3], 5], [list(range(10)), 4], [[-1, -2], 2], [list(range(100)), 7]],
    },
    {
        "id": "builtin/count-set-bits", "kind": "function", "difficulty": 1, "tags": ["bits", "math"],
        "entry_point": "count_bits",
        "prompt": "Write `count_bits(n: int) -> int` returning how many 1 digits the binary representation "
                  "of the non-negative integer `n` has (n may be far larger than 64 bits).",
        "reference": r"""def count_bits(n):
    return bin(n).count('1')
""",
        "public": [[5], [0], [255]],
        "hidden": [[1], [2**40], [2**64 - 1], [123456789], [1023], [2**100 + 7], [3**200]],
    },
    {
        "id": "builtin/collatz-steps", "kind": "function", "difficulty": 1, "tags": ["math", "loops"],
        "entry_point": "collatz_steps",
        "prompt": "Write `collatz_steps(n: int) -> int` for n >= 1: repeatedly replace n by n / 2 when it is "
                  "even and by 3n + 1 when it is odd, and return how many replacements it takes to reach 1 "
                  "(0 when n is already 1).",
        "reference": r"""def collatz_steps(n):
    steps = 0
    while n != 1:
        n = n // 2 if n % 2 == 0 else 3 * n + 1
        steps += 1
    return steps
""",
        "public": [[1], [6], [7]],
        "hidden": [[2], [27], [97], [871], [63728127], [2**60], [10**18 + 1]],
    },
    {
        "id": "builtin/column-sums", "kind": "stdio", "difficulty": 1, "tags": ["io", "arithmetic"],
        "prompt": "Standard input holds rows of integers, one row per line, separated by whitespace. Rows "
                  "may have different lengths (a missing entry counts as 0) and blank lines are ignored. "
                  "Print on one line the sum of each column, from the first column to the last column of "
                  "the longest row, separated by single spaces. With no numbers at all, print an empty line.",
        "reference": r"""import sys
sums = []
for line in sys.stdin.read().splitlines():
    for i, tok in enumerate(line.split()):
        if i == len(sums):
            sums.append(0)
        sums[i] += int(tok)
print(' '.join(map(str, sums)))
""",
        "public": ["1 2 3\n4 5 6\n", "7\n", "1 2\n3\n\n4 5 6\n"],
        "hidden": ["", "-1 -2\n1 2\n", "\n\n", "10\n20\n30\n", "5 -5 5\n\n\n-5 5\n",
                   "".join(" ".join(str((r * 31 + c * 17) % 201 - 100) for c in range(r % 50 + 1)) + "\n"
                           for r in range(100))],
    },
    # ------------------------------------------------------------------------- difficulty 2
    {
        "id": "builtin/to-base", "kind": "function", "difficulty": 2, "tags": ["math", "strings"],
        "entry_point": "to_base",
        "prompt": "Write `to_base(n: int, base: int) -> str` writing the integer `n` in the given base "
                  "(2 <= base <= 36) with the digits 0-9 then lowercase a-z, without leading zeros; zero "
                  "is \"0\" and a negative number gets a leading '-'.",
        "reference": r"""def to_base(n, base):
    digits = '0123456789abcdefghijklmnopqrstuvwxyz'
    if n == 0:
        return '0'
    sign = '-' if n < 0 else ''
    n = abs(n)
    out = []
    while n:
        n, r = divmod(n, base)
        out.append(digits[r])
    return sign + ''.join(reversed(out))
""",
        "public": [[10, 2], [255, 16], [0, 7]],
        "hidden": [[-255, 16], [35, 36], [36, 36], [2**64, 36], [1, 2], [-7, 3], [100, 10], [0, 2]],
    },
    {
        "id": "builtin/flatten-nested", "kind": "function", "difficulty": 2, "tags": ["lists", "recursion"],
        "entry_point": "flatten",
        "prompt": "Write `flatten(x: list) -> list[int]`: `x` is a list whose items are integers or, "
                  "recursively, lists of the same kind. Return all the integers it contains, in the order "
                  "they appear when reading left to right.",
        "reference": r"""def flatten(x):
    out = []
    stack = [iter(x)]
    while stack:
        for item in stack[-1]:
            if isinstance(item, list):
                stack.append(iter(item))
                break
            out.append(item)
        else:
            stack.pop()
    return out
""",
        "public": [[[1, [2, [3]], 4]], [[]], [[[[]]]]],
        "hidden": [[[[1], [2], [3]]], [[[[[[[[5]]]]]], 6]], [[-1, [0, [-2]], []]],
                   [[list(range(5)), [list(range(5, 10))]]], [[[i, [i * 2, []]] for i in range(30)]],
                   [[[[[[[[[[[[1, 2], 3]]]]]]]]], [[[[[[[[[[4]]]]]]]]]]]]],
    },
    {
        "id": "builtin/int-histogram", "kind": "stdio", "difficulty": 2, "tags": ["io", "hashing", "sorting"],
        "prompt": "Standard input holds integers separated by whitespace. For each distinct value, in "
                  "increasing order, print a line with the value, one space, and a bar of '*' characters. "
                  "The bar's length is the value's count, except when the largest count exceeds 20: then "
                  "each bar's length is count * 20 // largest_count (integer division), but at least 1. "
                  "Print nothing for an input without numbers.",
        "reference": r"""import sys
from collections import Counter
c = Counter(int(t) for t in sys.stdin.read().split())
top = max(c.values(), default=0)
for v in sorted(c):
    n = c[v] if top <= 20 else max(1, c[v] * 20 // top)
    print(v, '*' * n)
""",
        "public": ["3 1 3 2 3\n", "5\n", "-1 -1 0\n"],
        "hidden": ["", "0 0 0 0\n", "10 -10 10\n", "7\n" + "2 " * 60 + "\n",
                   " ".join(str(i * i % 13 - 6) for i in range(400)) + "\n", "4 " * 20 + "9\n"],
    },
    {
        "id": "builtin/csv-transpose", "kind": "stdio", "difficulty": 2, "tags": ["io", "strings"],
        "prompt": "Standard input holds a table in a simple CSV form: each line is one row whose fields are "
                  "separated by commas (fields contain no commas, quotes or whitespace, and may be empty); "
                  "every row has the same number of fields; blank lines are skipped. Print the transposed "
                  "table in the same form: line i holds field i of every row, in row order.",
        "reference": r"""import sys
rows = [line.split(',') for line in sys.stdin.read().splitlines() if line.strip()]
for col in zip(*rows):
    print(','.join(col))
""",
        "public": ["a,b,c\n1,2,3\n", "x\n", "name,age\nann,31\nbob,27\n"],
        "hidden": ["", "1,2,3\n", "a,,c\n,b,\n", "1\n2\n\n3\n",
                   "".join(",".join(f"r{r}c{c}" for c in range(30)) + "\n" for r in range(25)),
                   "p,q\nr,s\nt,u\n"],
    },
    {
        "id": "builtin/word-wrap", "kind": "function", "difficulty": 2, "tags": ["strings", "greedy"],
        "entry_point": "wrap",
        "prompt": "Write `wrap(text: str, width: int) -> list[str]` that breaks the words of `text` (separated "
                  "by any whitespace) into lines greedily: a word is appended to the current line, after one "
                  "space, when the line then has at most `width` characters; otherwise it starts a new line. "
                  "A word longer than `width` is not split and sits on a line of its own. Return the lines "
                  "([] when there are no words).",
        "reference": r"""def wrap(text, width):
    lines = []
    cur = ''
    for w in text.split():
        if cur and len(cur) + 1 + len(w) <= width:
            cur += ' ' + w
        else:
            if cur:
                lines.append(cur)
            cur = w
    if cur:
        lines.append(cur)
    return lines
""",
        "public": [["the quick brown fox", 10], ["", 5], ["hello", 3]],
        "hidden": [["a b c d e", 1], ["a b c d e", 3], ["  lots   of\n space  ", 20],
                   ["supercalifragilistic is long", 5], ["exact fit", 9],
                   [" ".join("w" * (i % 9 + 1) for i in range(200)), 40]],
    },
    # ------------------------------------------------------------------------- difficulty 3
    {
        "id": "builtin/stack-machine", "kind": "function", "difficulty": 3, "tags": ["simulation", "stacks"],
        "entry_point": "run",
        "prompt": "Write `run(program: list[str]) -> list[int] | None` that executes a tiny stack machine. "
                  "Each string is one instruction, numbered from 0: `push K` (push the integer K), `pop` "
                  "(discard the top), `add`, `sub`, `mul` (pop b, the top, then a; push a + b, a - b or "
                  "a * b), `dup` (push a copy of the top), `over` (push a copy of the value just below the "
                  "top), `swap` (exchange the top two), `jz K` (pop the top; if it is 0 continue at "
                  "instruction K) and `jmp K` (continue at instruction K). Execution starts at instruction 0 "
                  "and ends when the next instruction number is outside the program. If an instruction needs "
                  "more values than the stack holds, execution stops and the function returns None; "
                  "otherwise it returns the final stack, bottom first. Programs finish within 10^5 steps.",
        "reference": r"""def run(program):
    code = [line.split() for line in program]
    need = {'push': 0, 'pop': 1, 'add': 2, 'sub': 2, 'mul': 2, 'dup': 1, 'over': 2, 'swap': 2,
            'jz': 1, 'jmp': 0}
    stack = []
    ip = 0
    while 0 <= ip < len(code):
        op = code[ip]
        if len(stack) < need[op[0]]:
            return None
        ip += 1
        if op[0] == 'push':
            stack.append(int(op[1]))
        elif op[0] == 'pop':
            stack.pop()
        elif op[0] in ('add', 'sub', 'mul'):
            b = stack.pop()
            a = stack.pop()
            stack.append(a + b if op[0] == 'add' else a - b if op[0] == 'sub' else a * b)
        elif op[0] == 'dup':
            stack.append(stack[-1])
        elif op[0] == 'over':
            stack.append(stack[-2])
        elif op[0] == 'swap':
            stack[-1], stack[-2] = stack[-2], stack[-1]
        elif op[0] == 'jz':
            if stack.pop() == 0:
                ip = int(op[1])
        else:
            ip = int(op[1])
    return stack
""",
        "public": [[["push 2", "push 3", "add"]], [["push 1", "push 2", "swap"]], [["pop"]]],
        "hidden": [[[]], [["push 5", "jmp -1", "push 6"]], [["push 3", "push -4", "swap", "sub", "dup", "mul"]],
                   [["push 0", "jz 3", "push 1", "push 2"]], [["push 1", "pop", "pop"]],
                   [["push 7", "push 1", "jz 0", "over", "sub"]],
                   [["push 0", "push 1000", "dup", "jz 11", "swap", "over", "add", "swap", "push 1", "sub",
                     "jmp 2", "pop"]],
                   [["push 1", "push 20", "dup", "jz 11", "swap", "over", "mul", "swap", "push 1", "sub",
                     "jmp 2", "pop"]]],
    },
    {
        "id": "builtin/sudoku-conflicts", "kind": "function", "difficulty": 3, "tags": ["arrays", "hashing"],
        "entry_point": "sudoku_conflicts",
        "prompt": "Write `sudoku_conflicts(board: list[str]) -> list[list[int]]`. `board` is 9 strings of 9 "
                  "characters, each a digit '1'-'9' or '.' for an empty cell. A filled cell is in conflict "
                  "when the same digit appears in another cell of its row, its column or its 3x3 box. "
                  "Return the [row, column] pairs (0-based) of all conflicting cells, sorted by row then "
                  "column ([] when there are none; the board need not be solvable).",
        "reference": r"""def sudoku_conflicts(board):
    groups = {}
    for r in range(9):
        for c in range(9):
            d = board[r][c]
            if d != '.':
                for key in (('r', r), ('c', c), ('b', r // 3 * 3 + c // 3)):
                    groups.setdefault((key, d), []).append((r, c))
    bad = set()
    for cells in groups.values():
        if len(cells) > 1:
            bad.update(cells)
    return [list(rc) for rc in sorted(bad)]
""",
        "public": [[["".join(ch if (r + c) % 3 == 0 else "." for c, ch in enumerate(row)) for r, row in enumerate(_SOLVED)]],
                   [["5.3...5..", *["." * 9] * 8]],
                   [["." * 9] * 9]],
        "hidden": [[list(_SOLVED)],
                   [["4" + "." * 8, *["." * 9] * 7, "4" + "." * 8]],
                   [["..7......", ".....7...", "7........", *["." * 9] * 6]],
                   [[_SOLVED[0][1] + _SOLVED[0][0] + _SOLVED[0][2:], *_SOLVED[1:]]],
                   [["9" * 9, *["." * 9] * 8]],
                   [["1........", ".1.......", "..1......", "...1.....", "....1....", ".....1...",
                     "......1..", ".......1.", "........1"]],
                   [["12.......", "3........", *["." * 9] * 4, "........2", ".......1.", "2.......8"]]],
    },
    {
        "id": "builtin/life-step", "kind": "function", "difficulty": 3, "tags": ["simulation", "grids"],
        "entry_point": "life_step",
        "prompt": "Write `life_step(grid: list[str]) -> list[str]` computing one generation of Conway's Game "
                  "of Life on a rectangular grid of '#' (alive) and '.' (dead) cells; cells outside the grid "
                  "count as dead. A live cell with 2 or 3 live neighbours (of its 8) stays alive, a dead "
                  "cell with exactly 3 becomes alive, every other cell is dead next. An empty grid gives [].",
        "reference": r"""def life_step(grid):
    h = len(grid)
    w = len(grid[0]) if h else 0
    out = []
    for r in range(h):
        row = []
        for c in range(w):
            n = sum(grid[rr][cc] == '#' for rr in range(max(0, r - 1), min(h, r + 2))
                    for cc in range(max(0, c - 1), min(w, c + 2)) if (rr, cc) != (r, c))
            alive = grid[r][c] == '#'
            row.append('#' if n == 3 or (alive and n == 2) else '.')
        out.append(''.join(row))
    return out
""",
        "public": [[[".....", "..#..", "..#..", "..#..", "....."]], [["##", "##"]], [["#"]]],
        "hidden": [[[]], [[".#...", "..#..", "###..", ".....", "....."]], [["###"]], [["#.#", ".#.", "#.#"]],
                   [["".join("#" if (r * 7 + c * 13) % 5 < 2 else "." for c in range(20)) for r in range(20)]],
                   [["....", ".##.", ".##.", "...."]]],
    },
    {
        "id": "builtin/lru-cache", "kind": "stdio", "difficulty": 3, "tags": ["io", "simulation", "hashing"],
        "prompt": "Simulate a least-recently-used cache. The first line of standard input is its capacity "
                  "C >= 1; each following line is `get KEY` or `put KEY VALUE` (keys and values are tokens "
                  "without spaces; blank lines are ignored). For `get`, print the key's value if it is "
                  "cached, else MISS. For `put` of a key already cached, replace its value; of a new key "
                  "when C keys are cached, first remove the least recently used key and print `evict KEY`, "
                  "then store it. Both a successful `get` and any `put` make the key the most recently used.",
        "reference": r"""import sys
from collections import OrderedDict
lines = sys.stdin.read().splitlines()
cap = int(lines[0])
cache = OrderedDict()
for line in lines[1:]:
    parts = line.split()
    if not parts:
        continue
    if parts[0] == 'get':
        k = parts[1]
        if k in cache:
            cache.move_to_end(k)
            print(cache[k])
        else:
            print('MISS')
    else:
        k, v = parts[1], parts[2]
        if k in cache:
            cache.move_to_end(k)
        elif len(cache) == cap:
            old, _ = cache.popitem(last=False)
            print('evict', old)
        cache[k] = v
""",
        "public": ["2\nput a 1\nput b 2\nget a\nput c 3\nget b\nget c\n", "1\nget x\n",
                   "3\nput k v\nput k w\nget k\n"],
        "hidden": ["1\nput a 1\nput b 2\nget a\nget b\n", "2\nput a 1\nput b 2\nput a 3\nput c 4\nget a\nget b\n",
                   "5\n", "2\nput x 1\n\nget y\nget x\nput y 2\nput z 3\nget x\n",
                   "50\n" + "".join(f"put {i * 37 % 101} {i}\n" if i % 3 else f"get {i * 53 % 101}\n" for i in range(1500)),
                   "3\nget a\nput a 1\nput b 2\nput c 3\nget a\nput d 4\nget b\nget c\n"],
    },
    {
        "id": "builtin/bank-ledger", "kind": "stdio", "difficulty": 3, "tags": ["io", "simulation", "hashing"],
        "prompt": "Process bank commands from standard input, one per line (blank lines are ignored; the "
                  "commands are numbered 1, 2, ... in order). Names are letters and digits; amounts are "
                  "positive integers. `open NAME` creates an account with balance 0; `deposit NAME AMOUNT`; "
                  "`withdraw NAME AMOUNT`; `transfer FROM TO AMOUNT`; `balance NAME` prints `NAME BALANCE`. "
                  "A command fails, changes nothing and prints `error N` (N its number) when it names an "
                  "account that does not exist, opens one that already exists, would make a balance "
                  "negative, or transfers from an account to itself. At the end print `---` and then every "
                  "account as `NAME BALANCE`, sorted by name (plain character-code order).",
        "reference": r"""import sys
acc = {}
n = 0
for line in sys.stdin.read().splitlines():
    p = line.split()
    if not p:
        continue
    n += 1
    op = p[0]
    ok = True
    if op == 'open':
        ok = p[1] not in acc
        if ok:
            acc[p[1]] = 0
    elif op == 'deposit':
        ok = p[1] in acc
        if ok:
            acc[p[1]] += int(p[2])
    elif op == 'withdraw':
        ok = p[1] in acc and acc[p[1]] >= int(p[2])
        if ok:
            acc[p[1]] -= int(p[2])
    elif op == 'transfer':
        a, b, x = p[1], p[2], int(p[3])
        ok = a in acc and b in acc and a != b and acc[a] >= x
        if ok:
            acc[a] -= x
            acc[b] += x
    elif op == 'balance':
        ok = p[1] in acc
        if ok:
            print(p[1], acc[p[1]])
    if not ok:
        print('error', n)
print('---')
for name in sorted(acc):
    print(name, acc[name])
""",
        "public": ["open ann\ndeposit ann 100\nwithdraw ann 30\nbalance ann\n", "deposit bob 5\n",
                   "open a\nopen b\ndeposit a 10\ntransfer a b 4\ntransfer b a 9\n"],
        "hidden": ["", "open x\nopen x\nbalance x\n", "open a\n\nwithdraw a 1\ndeposit a 1\nwithdraw a 1\nbalance a\n",
                   "open Zed\nopen amy\nopen Bob\ndeposit amy 7\ntransfer amy amy 1\ntransfer amy Zed 7\nbalance Zed\n",
                   "open a\ntransfer a ghost 1\nbalance ghost\nopen b\ndeposit b 1000000000000\ntransfer b a 999999999999\n",
                   "".join(f"open u{i}\n" for i in range(20))
                   + "".join(f"deposit u{i % 20} {i + 1}\ntransfer u{i % 20} u{(i * 7) % 20} {i % 13 + 1}\n" for i in range(300))
                   + "".join(f"balance u{i}\n" for i in range(0, 20, 3))],
    },
    # ------------------------------------------------------------------------- difficulty 4
    {
        "id": "builtin/grid-paths-obstacles", "kind": "function", "difficulty": 4, "tags": ["dynamic-programming", "grids"],
        "entry_point": "count_paths",
        "prompt": "Write `count_paths(grid: list[str]) -> int`. `grid` is a non-empty rectangle of '.' (free) "
                  "and '#' (blocked) cells. Count the paths from the top-left cell to the bottom-right cell "
                  "that move only right or down and visit only free cells (0 if either end is blocked), and "
                  "return the count modulo 1_000_000_007. Grids can be 100 x 100.",
        "reference": r"""def count_paths(grid):
    MOD = 10**9 + 7
    w = len(grid[0])
    ways = [0] * w
    ways[0] = 1
    for row in grid:
        for c in range(w):
            if row[c] == '#':
                ways[c] = 0
            elif c:
                ways[c] = (ways[c] + ways[c - 1]) % MOD
    return ways[-1]
""",
        "public": [[["...", "...", "..."]], [["..", "#."]], [[".#", "#."]]],
        "hidden": [[["."]], [["#"]], [["." * 100] * 100], [["." * 50]], [["#..", "...", "..."]],
                   [["".join("#" if (r * 17 + c * 29) % 11 == 0 and (r, c) != (0, 0) else "." for c in range(60))
                     for r in range(60)]],
                   [[".#.", "...", "..."]]],
    },
    {
        "id": "builtin/sliding-window-max", "kind": "function", "difficulty": 4, "tags": ["deque", "arrays"],
        "entry_point": "window_max",
        "prompt": "Write `window_max(nums: list[int], k: int) -> list[int]` returning, for each window of "
                  "`k` consecutive elements of `nums` (k >= 1) from left to right, the largest element in "
                  "it; [] when k > len(nums). It should run in linear time.",
        "reference": r"""from collections import deque
def window_max(nums, k):
    out = []
    dq = deque()
    for i, x in enumerate(nums):
        while dq and nums[dq[-1]] <= x:
            dq.pop()
        dq.append(i)
        if dq[0] <= i - k:
            dq.popleft()
        if i >= k - 1:
            out.append(nums[dq[0]])
    return out
""",
        "public": [[[1, 3, -1, -3, 5, 3, 6, 7], 3], [[4, 2], 1], [[1, 2], 3]],
        "hidden": [[[9], 1], [[], 2], [[5, 4, 3, 2, 1], 2], [[-5, -1, -3], 3], [[2, 2, 2, 2], 2],
                   [[(i * 7919) % 1000 for i in range(3000)], 50]],
    },
    {
        "id": "builtin/wildcard-filter", "kind": "function", "difficulty": 4, "tags": ["strings", "dynamic-programming"],
        "entry_point": "filter_matches",
        "prompt": "Write `filter_matches(pattern: str, names: list[str]) -> list[str]` returning, in their "
                  "original order, the names that match `pattern` as a whole. In the pattern '?' matches "
                  "exactly one character, '*' matches any sequence of characters (also the empty one), and "
                  "every other character matches itself. Names contain only letters, digits, '.' and '_'. "
                  "Patterns with many '*' must not take exponential time.",
        "reference": r"""def filter_matches(pattern, names):
    def ok(s):
        i = j = 0
        star = -1
        mark = 0
        while i < len(s):
            if j < len(pattern) and (pattern[j] == '?' or pattern[j] == s[i]):
                i += 1
                j += 1
            elif j < len(pattern) and pattern[j] == '*':
                star = j
                mark = i
                j += 1
            elif star != -1:
                j = star + 1
                mark += 1
                i = mark
            else:
                return False
        while j < len(pattern) and pattern[j] == '*':
            j += 1
        return j == len(pattern)
    return [s for s in names if ok(s)]
""",
        "public": [["*.txt", ["a.txt", "b.py", "txt", ".txt"]], ["?at", ["cat", "at", "bat", "chat"]],
                   ["", ["", "a"]]],
        "hidden": [["*", ["", "x", "anything.at_all"]], ["a*b?c", ["abxc", "ab_c", "axxxbyc", "abc", "aXbc"]],
                   ["**a**", ["a", "b", "ba", "bab"]], ["?", ["", "q", "qq"]],
                   ["*a*a*a*a*a*a*a*a*a*b", ["a" * 60, "a" * 59 + "b", "b" * 60, "ab" * 30, "a" * 9 + "b"]],
                   ["*ab*ba*?", ["ab" * 500 + "ba", "ab" * 500 + "bax", "ba" * 600, "abba_"]],
                   ["data_??.csv", ["data_01.csv", "data_1.csv", "data_123.csv", "Data_01.csv", "data_ab.csv"]]],
    },
    {
        "id": "builtin/word-segmentation", "kind": "function", "difficulty": 4, "tags": ["dynamic-programming", "strings"],
        "entry_point": "segment", "checker": _SEGMENT_CHECKER,
        "prompt": "Write `segment(s: str, words: list[str]) -> list[str] | None` that splits `s` into a "
                  "sequence of words from `words` (non-empty strings; each may be used any number of times) "
                  "whose concatenation is exactly `s`. Return any one such sequence (any valid split is "
                  "accepted), [] for the empty string, or None when no split exists. `s` can be 1000 "
                  "characters long.",
        "reference": r"""def segment(s, words):
    vocab = set(words)
    lens = sorted({len(w) for w in vocab})
    n = len(s)
    back = [-1] * (n + 1)
    back[0] = 0
    for i in range(1, n + 1):
        for L in lens:
            if L > i:
                break
            if back[i - L] != -1 and s[i - L:i] in vocab:
                back[i] = i - L
                break
    if back[n] == -1:
        return None
    out = []
    i = n
    while i > 0:
        out.append(s[back[i]:i])
        i = back[i]
    return out[::-1]
""",
        "public": [["applepie", ["pie", "apple", "app"]], ["catsand", ["cat", "cats", "and", "sand"]],
                   ["abc", ["ab", "bc"]]],
        "hidden": [["", ["a"]], ["aaaa", ["a", "aa"]], ["dogcat", ["cat"]], ["x", ["x", "xx"]],
                   ["ab" * 300 + "c", ["a", "b", "ab", "ba", "aba", "bab"]],
                   ["ab" * 300 + "a", ["a", "b", "ab", "ba", "aba", "bab"]],
                   ["thequickbrownfoxjumps", ["the", "quick", "brown", "fox", "jump", "jumps", "s", "he", "t"]]],
    },
    # ------------------------------------------------------------------------- difficulty 5
    {
        "id": "builtin/expression-eval", "kind": "function", "difficulty": 5, "tags": ["parsing", "stacks"],
        "entry_point": "evaluate",
        "prompt": "Write `evaluate(expr: str) -> int` computing an integer arithmetic expression made of "
                  "non-negative integer literals, the binary operators + - * /, parentheses and spaces. '*' "
                  "and '/' bind tighter than '+' and '-'; operators of equal precedence group left to right. "
                  "'/' is integer division rounding toward zero (so -7 / 2 is -3); no division by zero "
                  "occurs. A '-' may also be a unary minus: at the start, after '(' or after another "
                  "operator (e.g. `2*-3`, `--4`, `-(1+2)`). Expressions can be thousands of characters long "
                  "with parentheses nested 100 deep; results can exceed 64 bits.",
        "reference": r"""import re
def evaluate(expr):
    tokens = re.findall(r'\d+|[-+*/()]', expr)
    pos = 0
    def peek():
        return tokens[pos] if pos < len(tokens) else None
    def take():
        nonlocal pos
        pos += 1
        return tokens[pos - 1]
    def sum_():
        v = product()
        while peek() in ('+', '-'):
            op = take()
            r = product()
            v = v + r if op == '+' else v - r
        return v
    def product():
        v = unary()
        while peek() in ('*', '/'):
            op = take()
            r = unary()
            if op == '*':
                v = v * r
            else:
                q = abs(v) // abs(r)
                v = q if (v < 0) == (r < 0) else -q
        return v
    def unary():
        if peek() == '-':
            take()
            return -unary()
        if peek() == '(':
            take()
            v = sum_()
            take()
            return v
        return int(take())
    return sum_()
""",
        "public": [["1 + 2 * 3"], ["(1 + 2) * 3"], ["10 / 3"]],
        "hidden": [["-7/2"], ["7 / -2"], ["2-3-4"], ["100/7/2"], ["-(2+3)*4"], ["--4 - -4"], [" 42 "],
                   ["0/5-0"], ["99999*99999*99999*99999-1"],
                   ["(" * 100 + "1+2" + ")*2" * 100],
                   ["+".join(f"{i}*{i % 7 + 1}-{i}/3" for i in range(1, 400))],
                   ["".join(f"({i}-" for i in range(1, 120)) + "0" + ")" * 119 + "/ 7"]],
    },
    {
        "id": "builtin/cheapest-route", "kind": "stdio", "difficulty": 5, "tags": ["graphs", "dijkstra"],
        "checker": _ROUTE_CHECKER,
        "prompt": "Standard input describes an undirected graph: the first line is `n m` (nodes 1..n), then m "
                  "lines `u v w`, an edge between u and v of weight w (1 <= w <= 10^6; there may be parallel "
                  "edges and loops). If node n cannot be reached from node 1, print -1. Otherwise print on "
                  "the first line the smallest total weight of a path from 1 to n, and on the second line "
                  "the nodes of one such cheapest path, from 1 to n, separated by spaces (just `1` when n is "
                  "1). When several paths are cheapest, any of them is accepted. n and m can be a few "
                  "thousand.",
        "reference": r"""import heapq, sys
data = sys.stdin.read().split()
n, m = int(data[0]), int(data[1])
adj = [[] for _ in range(n + 1)]
for i in range(m):
    u, v, w = int(data[2 + 3 * i]), int(data[3 + 3 * i]), int(data[4 + 3 * i])
    adj[u].append((v, w))
    adj[v].append((u, w))
INF = float('inf')
dist = [INF] * (n + 1)
prev = [0] * (n + 1)
dist[1] = 0
heap = [(0, 1)]
while heap:
    d, u = heapq.heappop(heap)
    if d > dist[u]:
        continue
    for v, w in adj[u]:
        if d + w < dist[v]:
            dist[v] = d + w
            prev[v] = u
            heapq.heappush(heap, (d + w, v))
if dist[n] == INF:
    print(-1)
else:
    path = [n]
    while path[-1] != 1:
        path.append(prev[path[-1]])
    print(dist[n])
    print(' '.join(map(str, reversed(path))))
""",
        "public": ["4 4\n1 2 1\n2 4 1\n1 3 1\n3 4 1\n", "3 1\n1 2 5\n", "1 0\n"],
        "hidden": ["2 3\n1 2 9\n2 1 4\n1 1 1\n", "5 4\n1 2 1\n2 3 1\n3 4 1\n4 5 1\n",
                   "5 6\n1 2 10\n1 3 3\n3 2 4\n2 4 2\n3 4 8\n4 5 1000000\n", "4 2\n1 2 1\n3 4 1\n",
                   "400 1199\n" + "".join(f"{(i * 7) % 400 + 1} {(i * 7 + 7) % 400 + 1} {(i * 31) % 5 + 6}\n" for i in range(399))
                   + "".join(f"{(i * 7919) % 400 + 1} {(i * 104729 + 13) % 400 + 1} {(i * 31) % 5 + 1}\n" for i in range(800)),
                   "400 760\n" + "".join(f"{r * 20 + c + 1} {r * 20 + c + 2} 1\n" for r in range(20) for c in range(19))
                   + "".join(f"{r * 20 + c + 1} {r * 20 + c + 21} 1\n" for r in range(19) for c in range(20)),
                   "250 799\n" + "".join(f"{(i * 11) % 250 + 1} {(i * 11 + 11) % 250 + 1} {i % 97 + 1}\n" for i in range(249))
                   + "".join(f"{(i * 13) % 250 + 1} {(i * 29 + 5) % 250 + 1} {i % 89 + 1}\n" for i in range(550))],
    },
    {
        "id": "builtin/equal-split", "kind": "stdio", "difficulty": 5, "tags": ["dynamic-programming", "subset-sum"],
        "checker": _SPLIT_CHECKER,
        "prompt": "Standard input holds n (1 <= n <= 200) on the first line and n positive integers (each at "
                  "most 1000) on the second. Decide whether they can be divided into two groups with equal "
                  "sums. If not, print NO. If so, print YES on the first line and, on the second, the "
                  "1-based positions of the numbers in one of the two groups, in increasing order, separated "
                  "by spaces. Any valid group is accepted.",
        "reference": r"""import sys
data = sys.stdin.read().split()
n = int(data[0])
a = [int(x) for x in data[1:1 + n]]
total = sum(a)
if total % 2:
    print('NO')
else:
    half = total // 2
    mask = (1 << (half + 1)) - 1
    reach = [1]
    for x in a:
        reach.append((reach[-1] | (reach[-1] << x)) & mask)
    if not (reach[-1] >> half) & 1:
        print('NO')
    else:
        picked = []
        t = half
        for i in range(n, 0, -1):
            if not (reach[i - 1] >> t) & 1:
                picked.append(i)
                t -= a[i - 1]
        print('YES')
        print(' '.join(map(str, reversed(picked))))
""",
        "public": ["4\n1 5 11 5\n", "3\n1 2 4\n", "2\n7 7\n"],
        "hidden": ["1\n10\n", "3\n3 3 6\n", "4\n2 2 2 4\n", "6\n1 1 1 1 1 1\n",
                   "200\n" + " ".join(str((i * 7919) % 997 + 1) for i in range(199)) + " "
                   + str(2 - sum((i * 7919) % 997 + 1 for i in range(199)) % 2) + "\n",
                   "150\n" + " ".join(str(2 * ((i * 37) % 400 + 1)) for i in range(149)) + " "
                   + str(2 * (1 + sum((i * 37) % 400 + 1 for i in range(149)) % 2)) + "\n",
                   "5\n1000 1000 1000 999 1\n", "5\n1 2 3 4 1000\n"],
    },
    {
        "id": "builtin/minimum-spanning-tree", "kind": "stdio", "difficulty": 5, "tags": ["graphs", "union-find", "greedy"],
        "prompt": "Standard input describes an undirected weighted graph: the first line is `n m` (nodes "
                  "1..n), then m lines `u v w`, an edge of integer weight w (weights may be negative or zero; "
                  "parallel edges and loops may occur). Print the total weight of a minimum spanning tree "
                  "(n - 1 edges connecting all nodes with the smallest weight sum; 0 when n is 1), or "
                  "IMPOSSIBLE when the graph is not connected. n and m can be a few thousand.",
        "reference": r"""import sys
data = sys.stdin.read().split()
n, m = int(data[0]), int(data[1])
edges = sorted((int(data[4 + 3 * i]), int(data[2 + 3 * i]), int(data[3 + 3 * i])) for i in range(m))
parent = list(range(n + 1))
def find(x):
    while parent[x] != x:
        parent[x] = parent[parent[x]]
        x = parent[x]
    return x
total = 0
used = 0
for w, u, v in edges:
    ru, rv = find(u), find(v)
    if ru != rv:
        parent[ru] = rv
        total += w
        used += 1
print(total if used == n - 1 else 'IMPOSSIBLE')
""",
        "public": ["3 3\n1 2 1\n2 3 2\n1 3 3\n", "4 2\n1 2 1\n3 4 1\n", "2 1\n1 2 7\n"],
        "hidden": ["1 0\n", "2 0\n", "3 4\n1 2 -5\n2 3 -1\n1 3 -4\n1 1 -100\n", "2 3\n1 2 5\n1 2 3\n2 1 4\n",
                   "4 6\n1 2 0\n2 3 0\n3 4 0\n1 3 0\n2 4 0\n1 4 0\n",
                   "600 1500\n" + "".join(f"{i + 1} {i + 2} {(i * 7919) % 2001 - 1000}\n" for i in range(599))
                   + "".join(f"{i % 600 + 1} {(i * 7919 + 1) % 600 + 1} {(i * 104729) % 2001 - 1000}\n" for i in range(901)),
                   "700 1000\n" + "".join(f"{(i * 3) % 700 + 1} {(i * 3 + 3) % 700 + 1} {i % 50 + 10}\n" for i in range(699))
                   + "".join(f"{(i * 13) % 700 + 1} {(i * 31 + 7) % 700 + 1} {i % 50}\n" for i in range(301))],
    },
]  # fmt: skip
