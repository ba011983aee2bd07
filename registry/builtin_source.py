"""The source of the ``builtin`` task set: problems written for this project, each with a reference
solution and the inputs of its public and hidden tests. Expected outputs are not typed by hand:
``python -m registry.build_builtin`` runs each reference on its inputs and writes
``registry/data/builtin.jsonl``; ``code-env tasks validate builtin`` then checks every reference in
the sandbox. Hidden inputs cover what a program fitted to the public outputs would miss (edge
cases, larger sizes, other branches)."""

from __future__ import annotations

from typing import Any

from .builtin_source_2 import TASKS as _SECOND
from .builtin_source_3 import TASKS as _THIRD

# Each entry: id, kind, difficulty, tags, prompt, entry point (function tasks), reference,
# public inputs, hidden inputs. Function inputs are argument lists; stdio inputs are stdin texts.
_FIRST: list[dict[str, Any]] = [
    {
        "id": "builtin/sum-of-evens", "kind": "function", "difficulty": 1, "tags": ["lists", "arithmetic"],
        "entry_point": "sum_of_evens",
        "prompt": "Write `sum_of_evens(nums: list[int]) -> int` returning the sum of the even numbers in `nums`.",
        "reference": "def sum_of_evens(nums):\n    return sum(n for n in nums if n % 2 == 0)\n",
        "public": [[[1, 2, 3, 4]], [[]], [[7, 9]]],
        "hidden": [[[-2, -3, 8]], [[0]], [list(range(100))], [[10**12, 3]], [[-1, -5, -7]]],
    },
    {
        "id": "builtin/reverse-words", "kind": "function", "difficulty": 1, "tags": ["strings"],
        "entry_point": "reverse_words",
        "prompt": "Write `reverse_words(s: str) -> str` returning the words of `s` in reverse order, "
                  "separated by single spaces (words are separated by any whitespace).",
        "reference": "def reverse_words(s):\n    return ' '.join(reversed(s.split()))\n",
        "public": [["hello world"], ["a"], ["one two three"]],
        "hidden": [["  padded   words  "], [""], ["tab\tand\nnewline"], ["x y x"], ["same same"]],
    },
    {
        "id": "builtin/is-palindrome", "kind": "function", "difficulty": 1, "tags": ["strings"],
        "entry_point": "is_palindrome",
        "prompt": "Write `is_palindrome(s: str) -> bool`: True when `s` reads the same backwards, ignoring "
                  "case and every character that is not a letter or a digit.",
        "reference": "def is_palindrome(s):\n    t = [c.lower() for c in s if c.isalnum()]\n    return t == t[::-1]\n",
        "public": [["Racecar"], ["hello"], ["A man, a plan, a canal: Panama"]],
        "hidden": [[""], ["!!"], ["ab"], ["No 'x' in Nixon"], ["12321"], ["12 3 4"]],
    },
    {
        "id": "builtin/fizzbuzz-line", "kind": "stdio", "difficulty": 1, "tags": ["io", "loops"],
        "prompt": "Read an integer n from standard input and print the numbers 1..n, one per line, with "
                  "multiples of 3 replaced by Fizz, of 5 by Buzz and of both by FizzBuzz.",
        "reference": "n = int(input())\nfor i in range(1, n + 1):\n"
                     "    print('FizzBuzz' if i % 15 == 0 else 'Fizz' if i % 3 == 0 else 'Buzz' if i % 5 == 0 else i)\n",
        "public": ["5\n", "1\n", "15\n"],
        "hidden": ["0\n", "3\n", "30\n", "16\n", "100\n"],
    },
    {
        "id": "builtin/two-sum-indices", "kind": "function", "difficulty": 2, "tags": ["hashing", "arrays"],
        "entry_point": "two_sum",
        "prompt": "Write `two_sum(nums: list[int], target: int) -> list[int]` returning the indices [i, j], "
                  "i < j, of the first pair (smallest j, then smallest i) with nums[i] + nums[j] == target, "
                  "or [] when there is none.",
        "reference": "def two_sum(nums, target):\n    seen = {}\n    for j, x in enumerate(nums):\n"
                     "        if target - x in seen:\n            return [seen[target - x], j]\n"
                     "        seen.setdefault(x, j)\n    return []\n",
        "public": [[[2, 7, 11, 15], 9], [[3, 2, 4], 6], [[1, 2], 7]],
        "hidden": [[[3, 3], 6], [[], 0], [[1, 5, 1, 5], 6], [[0, -1, 1], 0], [list(range(1000)), 1997], [[5], 10]],
    },
    {
        "id": "builtin/run-length", "kind": "function", "difficulty": 2, "tags": ["strings"],
        "entry_point": "run_length",
        "prompt": "Write `run_length(s: str) -> str` that encodes runs as count followed by character, "
                  "e.g. 'aaab' -> '3a1b'.",
        "reference": "def run_length(s):\n    out = []\n    i = 0\n    while i < len(s):\n        j = i\n"
                     "        while j < len(s) and s[j] == s[i]:\n            j += 1\n"
                     "        out.append(f'{j - i}{s[i]}')\n        i = j\n    return ''.join(out)\n",
        "public": [["aaab"], ["abc"], [""]],
        "hidden": [["a" * 12], ["aabbaa"], ["zzzzzzzzzzy"], [" "], ["1112"]],
    },
    {
        "id": "builtin/word-frequency", "kind": "stdio", "difficulty": 2, "tags": ["io", "hashing", "sorting"],
        "prompt": "Read text from standard input. Print each distinct lowercase word (letters a-z only; every "
                  "other character separates words) with its count, as `word count`, most frequent first, "
                  "ties in alphabetical order.",
        "reference": "import re, sys\nfrom collections import Counter\n"
                     "c = Counter(re.findall('[a-z]+', sys.stdin.read().lower()))\n"
                     "for w, n in sorted(c.items(), key=lambda kv: (-kv[1], kv[0])):\n    print(w, n)\n",
        "public": ["the cat the dog\n", "a\n", "B b a\n"],
        "hidden": ["\n", "Hello, hello! HELLO?\n", "x1y2z x\n", "zeta alpha zeta alpha beta\n", "it's it is\n"],
    },
    {
        "id": "builtin/balanced-brackets", "kind": "function", "difficulty": 2, "tags": ["stacks", "strings"],
        "entry_point": "balanced",
        "prompt": "Write `balanced(s: str) -> bool`: True when every bracket in `s` among ()[]{} is closed "
                  "in the right order (other characters are ignored).",
        "reference": "def balanced(s):\n    pairs = {')': '(', ']': '[', '}': '{'}\n    stack = []\n"
                     "    for c in s:\n        if c in '([{':\n            stack.append(c)\n"
                     "        elif c in pairs:\n            if not stack or stack.pop() != pairs[c]:\n"
                     "                return False\n    return not stack\n",
        "public": [["([]{})"], ["(]"], ["a(b)c"]],
        "hidden": [[""], ["((("], ["())"], ["{[()()]}"], ["]["], ["([)]"]],
    },
    {
        "id": "builtin/merge-intervals", "kind": "function", "difficulty": 3, "tags": ["sorting", "intervals"],
        "entry_point": "merge",
        "prompt": "Write `merge(intervals: list[list[int]]) -> list[list[int]]` merging overlapping or "
                  "touching closed intervals [a, b]; return them sorted by start.",
        "reference": "def merge(intervals):\n    out = []\n    for a, b in sorted(intervals):\n"
                     "        if out and a <= out[-1][1]:\n            out[-1][1] = max(out[-1][1], b)\n"
                     "        else:\n            out.append([a, b])\n    return out\n",
        "public": [[[[1, 3], [2, 6], [8, 10]]], [[[1, 4], [4, 5]]], [[]]],
        "hidden": [[[[5, 6], [1, 2]]], [[[1, 10], [2, 3], [4, 5]]], [[[0, 0]]], [[[3, 5], [1, 2], [2, 3]]], [[[-5, -1], [-3, 0]]]],
    },
    {
        "id": "builtin/primes-up-to", "kind": "function", "difficulty": 3, "tags": ["math", "sieve"],
        "entry_point": "primes_up_to",
        "prompt": "Write `primes_up_to(n: int) -> list[int]` returning every prime p <= n in increasing order.",
        "reference": "def primes_up_to(n):\n    if n < 2:\n        return []\n    sieve = bytearray([1]) * (n + 1)\n"
                     "    sieve[0] = sieve[1] = 0\n    for i in range(2, int(n ** 0.5) + 1):\n"
                     "        if sieve[i]:\n            sieve[i * i :: i] = bytearray(len(sieve[i * i :: i]))\n"
                     "    return [i for i in range(n + 1) if sieve[i]]\n",
        "public": [[10], [2], [1]],
        "hidden": [[0], [-7], [97], [100], [2000]],
    },
    {
        "id": "builtin/matrix-spiral", "kind": "function", "difficulty": 3, "tags": ["arrays", "simulation"],
        "entry_point": "spiral",
        "prompt": "Write `spiral(m: list[list[int]]) -> list[int]` returning the elements of matrix `m` in "
                  "clockwise spiral order starting at the top-left corner.",
        "reference": "def spiral(m):\n    out = []\n    m = [row[:] for row in m]\n    while m and m[0]:\n"
                     "        out += m.pop(0)\n        m = [list(r) for r in zip(*m)][::-1]\n    return out\n",
        "public": [[[[1, 2, 3], [4, 5, 6], [7, 8, 9]]], [[[1]]], [[[1, 2], [3, 4]]]],
        "hidden": [[[]], [[[1, 2, 3, 4]]], [[[1], [2], [3]]], [[[1, 2, 3], [4, 5, 6]]], [[[i * 5 + j for j in range(5)] for i in range(4)]]],
    },
    {
        "id": "builtin/shortest-path-grid", "kind": "stdio", "difficulty": 4, "tags": ["graphs", "bfs"],
        "prompt": "Standard input holds a grid: the first line `h w`, then h lines of w characters: '.' free, "
                  "'#' wall, 'S' start, 'G' goal. Print the length of a shortest 4-neighbour path from S to G, "
                  "or -1 when there is none.",
        "reference": "import sys\nfrom collections import deque\nlines = sys.stdin.read().split()\n"
                     "h, w = int(lines[0]), int(lines[1])\ng = lines[2:2 + h]\n"
                     "s = next((r, c) for r in range(h) for c in range(w) if g[r][c] == 'S')\n"
                     "d = {s: 0}\nq = deque([s])\nans = -1\nwhile q:\n    r, c = q.popleft()\n"
                     "    if g[r][c] == 'G':\n        ans = d[(r, c)]\n        break\n"
                     "    for nr, nc in ((r + 1, c), (r - 1, c), (r, c + 1), (r, c - 1)):\n"
                     "        if 0 <= nr < h and 0 <= nc < w and g[nr][nc] != '#' and (nr, nc) not in d:\n"
                     "            d[(nr, nc)] = d[(r, c)] + 1\n            q.append((nr, nc))\nprint(ans)\n",
        "public": ["2 3\nS.G\n...\n", "1 3\nS#G\n", "3 3\nS..\n.#.\n..G\n"],
        "hidden": ["1 2\nSG\n", "3 3\nS#.\n##.\n..G\n", "4 5\nS....\n####.\n.....\nG####\n", "2 2\nS.\n.G\n",
                   "5 5\nS...#\n.##.#\n.#..#\n.#.##\n...#G\n"],
    },
    {
        "id": "builtin/longest-increasing-subsequence", "kind": "function", "difficulty": 4, "tags": ["dynamic-programming"],
        "entry_point": "lis_length",
        "prompt": "Write `lis_length(nums: list[int]) -> int` returning the length of the longest strictly "
                  "increasing subsequence of `nums` (it must handle 10^5 numbers quickly).",
        "reference": "from bisect import bisect_left\ndef lis_length(nums):\n    tails = []\n    for x in nums:\n"
                     "        i = bisect_left(tails, x)\n        if i == len(tails):\n            tails.append(x)\n"
                     "        else:\n            tails[i] = x\n    return len(tails)\n",
        "public": [[[10, 9, 2, 5, 3, 7, 101, 18]], [[]], [[5, 5, 5]]],
        "hidden": [[[1, 2, 3, 4]], [[4, 3, 2, 1]], [[0, 8, 4, 12, 2, 10, 6, 14, 1, 9]], [list(range(100000))],
                   [[(i * 7919) % 10007 for i in range(50000)]]],
    },
    {
        "id": "builtin/edit-distance", "kind": "function", "difficulty": 4, "tags": ["dynamic-programming", "strings"],
        "entry_point": "edit_distance",
        "prompt": "Write `edit_distance(a: str, b: str) -> int`: the minimum number of single-character "
                  "insertions, deletions and substitutions turning `a` into `b`.",
        "reference": "def edit_distance(a, b):\n    prev = list(range(len(b) + 1))\n    for i, ca in enumerate(a, 1):\n"
                     "        cur = [i]\n        for j, cb in enumerate(b, 1):\n"
                     "            cur.append(min(prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + (ca != cb)))\n"
                     "        prev = cur\n    return prev[-1]\n",
        "public": [["kitten", "sitting"], ["", "abc"], ["same", "same"]],
        "hidden": [["abc", ""], ["intention", "execution"], ["a" * 300, "b" * 300], ["flaw", "lawn"], ["ab", "ba"]],
    },
    {
        "id": "builtin/mean-and-stdev", "kind": "function", "difficulty": 2, "tags": ["math", "floats"],
        "entry_point": "mean_stdev", "comparator": {"kind": "float", "abs_tol": 1e-6, "rel_tol": 1e-6},
        "prompt": "Write `mean_stdev(xs: list[float]) -> list[float]` returning [mean, population standard "
                  "deviation] of a non-empty list.",
        "reference": "def mean_stdev(xs):\n    m = sum(xs) / len(xs)\n    return [m, (sum((x - m) ** 2 for x in xs) / len(xs)) ** 0.5]\n",
        "public": [[[1.0, 2.0, 3.0]], [[5.0]], [[0.1, 0.2]]],
        "hidden": [[[-1.0, 1.0]], [[1e6, 1e6 + 1]], [[2.5] * 10], [[0.0, 10.0, 20.0, 30.0]], [[3.3, -7.1, 0.0]]],
    },
    {
        "id": "builtin/topological-order", "kind": "function", "difficulty": 5, "tags": ["graphs", "sorting"],
        "entry_point": "topo_order",
        "prompt": "Write `topo_order(n: int, edges: list[list[int]]) -> list[int]`: an ordering of nodes "
                  "0..n-1 where each edge [u, v] has u before v, choosing the smallest available node at each "
                  "step; return [] if the graph has a cycle.",
        "reference": "import heapq\ndef topo_order(n, edges):\n    indeg = [0] * n\n    adj = [[] for _ in range(n)]\n"
                     "    for u, v in edges:\n        adj[u].append(v)\n        indeg[v] += 1\n"
                     "    heap = [i for i in range(n) if indeg[i] == 0]\n    heapq.heapify(heap)\n    out = []\n"
                     "    while heap:\n        u = heapq.heappop(heap)\n        out.append(u)\n"
                     "        for v in adj[u]:\n            indeg[v] -= 1\n            if indeg[v] == 0:\n"
                     "                heapq.heappush(heap, v)\n    return out if len(out) == n else []\n",
        "public": [[3, [[0, 1], [1, 2]]], [3, [[2, 0]]], [2, [[0, 1], [1, 0]]]],
        "hidden": [[1, []], [4, [[3, 0], [3, 1], [1, 0]]], [5, [[4, 3], [3, 2], [2, 1], [1, 0]]], [3, [[0, 0]]],
                   [6, [[5, 2], [5, 0], [4, 0], [4, 1], [2, 3], [3, 1]]]],
    },
]  # fmt: skip

TASKS: list[dict[str, Any]] = _FIRST + _SECOND + _THIRD
