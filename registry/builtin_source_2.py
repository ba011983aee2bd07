"""Tasks of the ``builtin`` set (second batch): problems written for this project, each with a
reference solution and the inputs of its public and hidden tests, in the format of
``registry/builtin_source.py``. Expected outputs are computed by running the references."""

from __future__ import annotations

from typing import Any

TASKS: list[dict[str, Any]] = [
    # ----------------------------------------------------------------- difficulty 1
    {
        "id": "builtin/caesar-cipher", "kind": "function", "difficulty": 1, "tags": ["strings"],
        "entry_point": "caesar",
        "prompt": "Write `caesar(text: str, shift: int) -> str` that shifts every ASCII letter of `text` by "
                  "`shift` places in the alphabet, wrapping around ('z' shifted by 1 is 'a') and keeping its "
                  "case. `shift` may be negative or larger than 26. Every other character (digits, "
                  "punctuation, spaces, non-ASCII letters) is left unchanged.",
        "reference": "def caesar(text, shift):\n    out = []\n    for c in text:\n"
                     "        if 'a' <= c <= 'z':\n            out.append(chr((ord(c) - 97 + shift) % 26 + 97))\n"
                     "        elif 'A' <= c <= 'Z':\n            out.append(chr((ord(c) - 65 + shift) % 26 + 65))\n"
                     "        else:\n            out.append(c)\n    return ''.join(out)\n",
        "public": [["abc", 1], ["Hello, World!", 3], ["xyz", 3]],
        "hidden": [["", 5], ["Zebra", -1], ["abc", 26], ["Mixed 123 Case", 65], ["señor ñu", 4],
                   ["The quick brown fox", -105]],
    },
    {
        "id": "builtin/digit-sum-base", "kind": "function", "difficulty": 1, "tags": ["math", "number-theory"],
        "entry_point": "digit_sum",
        "prompt": "Write `digit_sum(n: int, base: int) -> int` returning the sum of the digits of |n| written "
                  "in base `base` (2 <= base <= 36), each digit counted by its value (e.g. 255 in base 16 is "
                  "'ff', whose digit sum is 15 + 15 = 30). The digit sum of 0 is 0.",
        "reference": "def digit_sum(n, base):\n    n = abs(n)\n    s = 0\n    while n:\n"
                     "        n, r = divmod(n, base)\n        s += r\n    return s\n",
        "public": [[123, 10], [255, 2], [0, 10]],
        "hidden": [[-255, 16], [10**20, 10], [35, 36], [1, 2], [12345678901234567890, 7], [-7, 10],
                   [2**100 - 1, 2]],
    },
    {
        "id": "builtin/longest-common-prefix", "kind": "function", "difficulty": 1, "tags": ["strings"],
        "entry_point": "common_prefix",
        "prompt": "Write `common_prefix(words: list[str]) -> str` returning the longest string that is a "
                  "prefix of every word in `words` (case-sensitive). Return '' for an empty list.",
        "reference": "def common_prefix(words):\n    if not words:\n        return ''\n    p = words[0]\n"
                     "    for w in words[1:]:\n        i = 0\n        while i < min(len(p), len(w)) and p[i] == w[i]:\n"
                     "            i += 1\n        p = p[:i]\n    return p\n",
        "public": [[["flower", "flow", "flight"]], [["dog", "racecar", "car"]], [["alone"]]],
        "hidden": [[[]], [["", "abc"]], [["same", "same", "same"]], [["prefix", "pre", "prefixes"]],
                   [["a" * 100 + "x", "a" * 100 + "y"]], [["Case", "case"]], [["interstellar", "internet", "interval"]]],
    },
    {
        "id": "builtin/camel-to-snake", "kind": "function", "difficulty": 1, "tags": ["strings"],
        "entry_point": "camel_to_snake",
        "prompt": "Write `camel_to_snake(name: str) -> str` converting a camelCase identifier to snake_case "
                  "by this exact rule: insert '_' before every uppercase ASCII letter A-Z that is not the "
                  "first character, then lowercase the whole string. Nothing else changes (so "
                  "'getHTTPCode' becomes 'get_h_t_t_p_code' and existing underscores are kept).",
        "reference": "def camel_to_snake(name):\n    out = []\n    for i, c in enumerate(name):\n"
                     "        if 'A' <= c <= 'Z' and i > 0:\n            out.append('_')\n"
                     "        out.append(c.lower())\n    return ''.join(out)\n",
        "public": [["camelCase"], ["already"], ["HelloWorld"]],
        "hidden": [[""], ["X"], ["getHTTPCode"], ["value2Go"], ["ABC"], ["with_Underscore"],
                   ["parseJsonFromUrlQuickly"]],
    },
    {
        "id": "builtin/pascal-row", "kind": "stdio", "difficulty": 1, "tags": ["io", "math"],
        "prompt": "Read an integer n (0 <= n <= 60) from standard input and print row n of Pascal's "
                  "triangle on one line, the numbers separated by single spaces. Row 0 is `1`, row 1 is "
                  "`1 1`, row 2 is `1 2 1`.",
        "reference": "n = int(input())\nrow = [1]\nfor _ in range(n):\n"
                     "    row = [a + b for a, b in zip([0] + row, row + [0])]\nprint(' '.join(map(str, row)))\n",
        "public": ["0\n", "4\n", "1\n"],
        "hidden": ["2\n", "10\n", "60\n", "5\n", "33\n"],
    },
    # ----------------------------------------------------------------- difficulty 2
    {
        "id": "builtin/int-to-roman", "kind": "function", "difficulty": 2, "tags": ["strings", "math"],
        "entry_point": "to_roman",
        "prompt": "Write `to_roman(n: int) -> str` returning the Roman numeral of 1 <= n <= 3999 in standard "
                  "form: symbols I=1, V=5, X=10, L=50, C=100, D=500, M=1000, largest first, using the "
                  "subtractive pairs IV, IX, XL, XC, CD and CM (4 is IV, never IIII; 1994 is MCMXCIV).",
        "reference": "def to_roman(n):\n"
                     "    table = [(1000, 'M'), (900, 'CM'), (500, 'D'), (400, 'CD'), (100, 'C'), (90, 'XC'),\n"
                     "             (50, 'L'), (40, 'XL'), (10, 'X'), (9, 'IX'), (5, 'V'), (4, 'IV'), (1, 'I')]\n"
                     "    out = []\n    for v, s in table:\n        q, n = divmod(n, v)\n        out.append(s * q)\n"
                     "    return ''.join(out)\n",
        "public": [[3], [58], [1994]],
        "hidden": [[1], [4], [3999], [444], [900], [2024], [49], [3888]],
    },
    {
        "id": "builtin/gcd-lcm-list", "kind": "function", "difficulty": 2, "tags": ["math", "number-theory"],
        "entry_point": "gcd_lcm",
        "prompt": "Write `gcd_lcm(nums: list[int]) -> list[int]` returning [g, l], the greatest common "
                  "divisor and least common multiple of the absolute values of the non-empty list `nums`. "
                  "Conventions: gcd(0, x) = |x| (so the gcd of only zeros is 0), and the lcm is 0 as soon as "
                  "any number is 0.",
        "reference": "from math import gcd\ndef gcd_lcm(nums):\n    g, l = 0, 1\n    for x in nums:\n"
                     "        x = abs(x)\n        g = gcd(g, x)\n        l = l * x // gcd(l, x) if x and l else 0\n"
                     "    return [g, l]\n",
        "public": [[[12, 18]], [[7]], [[4, 6, 8]]],
        "hidden": [[[-4, 6]], [[0, 5]], [[0, 0]], [[17, 19, 23]], [list(range(1, 31))], [[10**12, 10**9]],
                   [[-9]]],
    },
    {
        "id": "builtin/valid-ipv4", "kind": "function", "difficulty": 2, "tags": ["strings", "parsing"],
        "entry_point": "ipv4_to_int",
        "prompt": "Write `ipv4_to_int(s: str) -> int`. `s` is a valid IPv4 address when it consists of exactly "
                  "four fields separated by '.', each field being 1 to 3 ASCII digits 0-9 with a value from 0 "
                  "to 255 and no leading zero unless the field is exactly '0' (no signs, no spaces, nothing "
                  "else). For a valid address return its 32-bit value a*2^24 + b*2^16 + c*2^8 + d; otherwise "
                  "return -1.",
        "reference": "def ipv4_to_int(s):\n    parts = s.split('.')\n    if len(parts) != 4:\n        return -1\n"
                     "    value = 0\n    for p in parts:\n"
                     "        if not 1 <= len(p) <= 3 or any(c not in '0123456789' for c in p):\n            return -1\n"
                     "        if (p[0] == '0' and len(p) > 1) or int(p) > 255:\n            return -1\n"
                     "        value = value * 256 + int(p)\n    return value\n",
        "public": [["192.168.0.1"], ["256.1.1.1"], ["0.0.0.0"]],
        "hidden": [["255.255.255.255"], ["01.2.3.4"], ["1.2.3.4.5"], ["10.0.0.1"], ["1..2.3"], [" 1.2.3.4"],
                   ["1.2.3.-4"], ["127.0.0.1"], ["\u0661.2.3.4"], [""]],
    },
    {
        "id": "builtin/anagram-groups", "kind": "function", "difficulty": 2, "tags": ["hashing", "sorting", "strings"],
        "entry_point": "anagram_groups",
        "prompt": "Write `anagram_groups(words: list[str]) -> list[list[str]]` grouping the words that are "
                  "anagrams of each other (same characters with the same counts; case-sensitive). Keep "
                  "duplicate words. Sort the words inside each group in ascending order and sort the groups "
                  "by their first word.",
        "reference": "def anagram_groups(words):\n    groups = {}\n    for w in words:\n"
                     "        groups.setdefault(''.join(sorted(w)), []).append(w)\n"
                     "    return sorted(sorted(g) for g in groups.values())\n",
        "public": [[["eat", "tea", "tan", "ate", "nat", "bat"]], [[]], [["a"]]],
        "hidden": [[["", ""]], [["abc", "bca", "cab", "xyz"]], [["Ab", "bA", "ab"]],
                   [["listen", "silent", "enlist", "google", "gogole"]], [["dup", "dup", "pud"]],
                   [["zz", "y", "x"]]],
    },
    {
        "id": "builtin/stock-max-profit", "kind": "stdio", "difficulty": 2, "tags": ["io", "arrays"],
        "prompt": "Standard input holds the prices of a stock on consecutive days: non-negative integers "
                  "separated by whitespace (possibly none). You may buy once and sell once on a later day. "
                  "Print the largest possible profit (sell price minus buy price), or 0 when no trade makes "
                  "a profit.",
        "reference": "import sys\nprices = list(map(int, sys.stdin.read().split()))\nbest, low = 0, None\n"
                     "for x in prices:\n    if low is None or x < low:\n        low = x\n"
                     "    best = max(best, x - low)\nprint(best)\n",
        "public": ["7 1 5 3 6 4\n", "7 6 4 3 1\n", "1 2\n"],
        "hidden": ["\n", "5\n", "3 8 1 9\n", "2 4 1 7 0 3\n",
                   " ".join(str((i * 37) % 1000 + 500 - i // 10) for i in range(3000)) + "\n",
                   "10\n20\n\n5\n12\n"],
    },
    # ----------------------------------------------------------------- difficulty 3
    {
        "id": "builtin/rotate-matrix", "kind": "function", "difficulty": 3, "tags": ["arrays", "matrices"],
        "entry_point": "rotate",
        "prompt": "Write `rotate(m: list[list[int]], k: int) -> list[list[int]]` returning the rectangular "
                  "matrix `m` rotated by 90 degrees clockwise k times (a negative k rotates "
                  "counter-clockwise; k may be large). An r x c matrix becomes c x r after one rotation; "
                  "the empty matrix [] stays []. Do not modify `m`.",
        "reference": "def rotate(m, k):\n    m = [list(r) for r in m]\n    for _ in range(k % 4):\n"
                     "        m = [list(r) for r in zip(*m[::-1])]\n    return m\n",
        "public": [[[[1, 2], [3, 4]], 1], [[[1, 2, 3]], 1], [[[1, 2], [3, 4]], 0]],
        "hidden": [[[[1, 2], [3, 4]], -1], [[[1, 2, 3], [4, 5, 6]], 2], [[], 3], [[[5]], 7],
                   [[[i * 4 + j for j in range(4)] for i in range(3)], 4001], [[[1, 2], [3, 4], [5, 6]], 3],
                   [[[1, 2, 3]], -6]],
    },
    {
        "id": "builtin/next-permutation", "kind": "function", "difficulty": 3, "tags": ["arrays", "permutations"],
        "entry_point": "next_permutation",
        "prompt": "Write `next_permutation(nums: list[int]) -> list[int]` returning the arrangement of the "
                  "same values that comes right after `nums` in lexicographic order (values may repeat). If "
                  "`nums` is already the largest arrangement, return the smallest one (sorted ascending). "
                  "Return a new list.",
        "reference": "def next_permutation(nums):\n    a = list(nums)\n    i = len(a) - 2\n"
                     "    while i >= 0 and a[i] >= a[i + 1]:\n        i -= 1\n    if i < 0:\n        return sorted(a)\n"
                     "    j = len(a) - 1\n    while a[j] <= a[i]:\n        j -= 1\n    a[i], a[j] = a[j], a[i]\n"
                     "    a[i + 1:] = reversed(a[i + 1:])\n    return a\n",
        "public": [[[1, 2, 3]], [[3, 2, 1]], [[1, 1, 5]]],
        "hidden": [[[]], [[7]], [[1, 5, 1]], [[2, 3, 1]], [[1, 3, 2, 2]], [list(range(1000))], [[-1, -3, 0, 0]],
                   [[5, 5, 5]]],
    },
    {
        "id": "builtin/number-to-words", "kind": "function", "difficulty": 3, "tags": ["strings", "recursion"],
        "entry_point": "to_words",
        "prompt": "Write `to_words(n: int) -> str` spelling 0 <= n < 10^12 in English, lowercase. 0 is "
                  "'zero'. Otherwise split n into groups of three digits for 'billion', 'million', "
                  "'thousand' and the units, skipping groups that are 0. A group 1..999 is spelled as "
                  "'<digit> hundred' when it has hundreds, followed by the rest 1..99: 'one'..'nineteen', "
                  "or a tens word ('twenty'..'ninety') joined to a non-zero ones word by a hyphen "
                  "('forty-two'). Words are separated by single spaces; no 'and', no commas. Example: "
                  "1000001 is 'one million one', 12345 is 'twelve thousand three hundred forty-five'.",
        "reference": "ONES = ['', 'one', 'two', 'three', 'four', 'five', 'six', 'seven', 'eight', 'nine', 'ten',\n"
                     "        'eleven', 'twelve', 'thirteen', 'fourteen', 'fifteen', 'sixteen', 'seventeen',\n"
                     "        'eighteen', 'nineteen']\n"
                     "TENS = ['', '', 'twenty', 'thirty', 'forty', 'fifty', 'sixty', 'seventy', 'eighty', 'ninety']\n"
                     "def _group(n):\n    words = []\n    if n >= 100:\n        words += [ONES[n // 100], 'hundred']\n"
                     "        n %= 100\n    if n >= 20:\n        words.append(TENS[n // 10] + ('-' + ONES[n % 10] if n % 10 else ''))\n"
                     "    elif n:\n        words.append(ONES[n])\n    return words\n"
                     "def to_words(n):\n    if n == 0:\n        return 'zero'\n    words = []\n"
                     "    for value, name in ((10**9, 'billion'), (10**6, 'million'), (10**3, 'thousand'), (1, '')):\n"
                     "        q, n = divmod(n, value)\n        if q:\n            words += _group(q)\n"
                     "            if name:\n                words.append(name)\n    return ' '.join(words)\n",
        "public": [[0], [42], [1234]],
        "hidden": [[13], [100], [1000001], [999999999999], [70], [115], [2000000019], [10**9], [500600]],
    },
    {
        "id": "builtin/interval-scheduling", "kind": "stdio", "difficulty": 3, "tags": ["io", "greedy", "intervals"],
        "prompt": "Standard input: a line with n (n >= 0), then n lines `start end` of integers with "
                  "start < end, each describing the half-open interval [start, end) (two intervals that only "
                  "share an endpoint do not overlap). Print the largest number of intervals that can be "
                  "chosen so that no two chosen intervals overlap.",
        "reference": "import sys\nd = sys.stdin.read().split()\nn = int(d[0])\n"
                     "iv = sorted(((int(d[1 + 2 * i]), int(d[2 + 2 * i])) for i in range(n)), key=lambda p: p[1])\n"
                     "count, end = 0, None\nfor s, e in iv:\n    if end is None or s >= end:\n"
                     "        count += 1\n        end = e\nprint(count)\n",
        "public": ["3\n1 3\n2 4\n3 5\n", "1\n0 10\n", "4\n1 2\n2 3\n3 4\n1 4\n"],
        "hidden": ["0\n", "3\n1 10\n2 3\n4 5\n", "5\n-5 -1\n-3 0\n0 2\n1 3\n2 4\n", "4\n1 5\n1 5\n1 5\n1 5\n",
                   "6\n11 12\n1 2\n9 10\n3 4\n7 8\n5 6\n",
                   "2000\n" + "".join(f"{(i * 7919) % 10000} {(i * 7919) % 10000 + 1 + (i * 31) % 50}\n"
                                      for i in range(2000))],
    },
    {
        "id": "builtin/flood-fill", "kind": "stdio", "difficulty": 3, "tags": ["io", "grids", "bfs"],
        "prompt": "Standard input: a first line `h w r c ch` (grid height and width, a 0-based start row and "
                  "column inside the grid, and a single printable non-space character ch), then h lines of "
                  "exactly w non-space characters. Replace by ch every cell of the 4-connected region of "
                  "cells holding the same character as cell (r, c), that region including (r, c) itself, "
                  "and print the resulting grid as h lines.",
        "reference": "import sys\nfrom collections import deque\nd = sys.stdin.read().split()\n"
                     "h, w, r, c = map(int, d[:4])\nch = d[4]\ng = [list(row) for row in d[5:5 + h]]\nold = g[r][c]\n"
                     "if old != ch:\n    g[r][c] = ch\n    q = deque([(r, c)])\n    while q:\n        y, x = q.popleft()\n"
                     "        for ny, nx in ((y + 1, x), (y - 1, x), (y, x + 1), (y, x - 1)):\n"
                     "            if 0 <= ny < h and 0 <= nx < w and g[ny][nx] == old:\n"
                     "                g[ny][nx] = ch\n                q.append((ny, nx))\n"
                     "print('\\n'.join(''.join(row) for row in g))\n",
        "public": ["3 3 1 1 2\n111\n110\n101\n", "1 1 0 0 x\n.\n", "2 4 0 0 #\n..##\n.#..\n"],
        "hidden": ["2 2 0 0 a\naa\nab\n", "3 5 2 4 o\n.....\n.###.\n.#.#.\n", "1 5 0 2 -\nabaab\n",
                   "4 4 3 0 b\naaaa\nabba\nabba\naaaa\n",
                   "50 50 25 25 @\n" + "".join("".join("#" if (i * j) % 7 == 3 else "." for j in range(50)) + "\n"
                                               for i in range(50)),
                   "3 3 0 2 Z\nzzz\nzZz\nzzz\n"],
    },
    # ----------------------------------------------------------------- difficulty 4
    {
        "id": "builtin/coin-change-min", "kind": "function", "difficulty": 4, "tags": ["dynamic-programming"],
        "entry_point": "min_coins",
        "prompt": "Write `min_coins(coins: list[int], amount: int) -> int` returning the fewest coins whose "
                  "values sum to exactly `amount` (0 <= amount <= 10^4), using any number of coins of each "
                  "distinct positive value in `coins`. Return 0 when amount is 0 and -1 when the amount "
                  "cannot be made.",
        "reference": "def min_coins(coins, amount):\n    inf = amount + 1\n    dp = [0] + [inf] * amount\n"
                     "    for a in range(1, amount + 1):\n        for c in coins:\n"
                     "            if c <= a and dp[a - c] + 1 < dp[a]:\n                dp[a] = dp[a - c] + 1\n"
                     "    return dp[amount] if dp[amount] <= amount else -1\n",
        "public": [[[1, 2, 5], 11], [[2], 3], [[1], 0]],
        "hidden": [[[1, 3, 4], 6], [[7, 13, 29, 31, 97], 9999], [[5, 10], 1], [[186, 419, 83, 408], 6249],
                   [[3], 9], [[2, 5, 10, 1], 27], [[], 7], [[9, 6, 5, 1], 11]],
    },
    {
        "id": "builtin/min-partition-difference", "kind": "function", "difficulty": 4,
        "tags": ["dynamic-programming", "subset-sum"],
        "entry_point": "min_partition_diff",
        "prompt": "Write `min_partition_diff(nums: list[int]) -> int`: split the non-negative integers "
                  "`nums` into two groups (every element in exactly one group; a group may be empty) and "
                  "return the smallest possible absolute difference between the two group sums. Lists may "
                  "hold a few hundred numbers up to 100.",
        "reference": "def min_partition_diff(nums):\n    total = sum(nums)\n    bits = 1\n    for x in nums:\n"
                     "        bits |= bits << x\n    for s in range(total // 2, -1, -1):\n"
                     "        if bits >> s & 1:\n            return total - 2 * s\n    return total\n",
        "public": [[[1, 6, 11, 5]], [[3, 3]], [[10]]],
        "hidden": [[[]], [[1, 2, 3, 9]], [[0, 0, 7]], [list(range(1, 60))], [[2] * 9 + [1]],
                   [[(i * 37) % 101 + 1 for i in range(200)]], [[100, 1, 1, 1]], [[2 * ((i * 13) % 50) for i in range(300)] + [1]]],
    },
    {
        "id": "builtin/count-islands", "kind": "stdio", "difficulty": 4, "tags": ["io", "grids", "graphs"],
        "prompt": "Standard input: a line `h w`, then h lines of w characters each, '1' for land and '0' for "
                  "water. An island is a maximal group of land cells connected horizontally or vertically "
                  "(not diagonally). Print the number of islands. Grids may be up to 200 x 200.",
        "reference": "import sys\nd = sys.stdin.read().split()\nh, w = int(d[0]), int(d[1])\n"
                     "g = [list(row) for row in d[2:2 + h]]\ncount = 0\nfor i in range(h):\n    for j in range(w):\n"
                     "        if g[i][j] == '1':\n            count += 1\n            g[i][j] = '0'\n"
                     "            stack = [(i, j)]\n            while stack:\n                y, x = stack.pop()\n"
                     "                for ny, nx in ((y + 1, x), (y - 1, x), (y, x + 1), (y, x - 1)):\n"
                     "                    if 0 <= ny < h and 0 <= nx < w and g[ny][nx] == '1':\n"
                     "                        g[ny][nx] = '0'\n                        stack.append((ny, nx))\n"
                     "print(count)\n",
        "public": ["4 5\n11000\n11000\n00100\n00011\n", "1 1\n0\n", "2 2\n11\n11\n"],
        "hidden": ["0 0\n", "3 3\n101\n010\n101\n", "1 7\n1010101\n", "5 5\n11111\n00001\n11101\n10001\n11111\n",
                   "120 120\n" + "".join("".join("1" if (i * i * 31 + j * 17 + i * j) % 5 < 2 else "0"
                                                 for j in range(120)) + "\n" for i in range(120)),
                   "60 60\n" + "".join("".join("1" if (i + j) % 2 == 0 else "0" for j in range(60)) + "\n"
                                       for i in range(60)),
                   "150 150\n" + "".join("1" * 150 + "\n" for _ in range(150))],
    },
    {
        "id": "builtin/evaluate-expression", "kind": "stdio", "difficulty": 4, "tags": ["io", "parsing", "recursion"],
        "prompt": "Standard input holds one arithmetic expression per line; print the integer value of each, "
                  "one per line, skipping lines that are empty or only whitespace. Expressions contain "
                  "non-negative integer literals, binary + - * /, unary minus (possibly repeated, as in "
                  "'--4'), parentheses and spaces. * and / bind tighter than + and -, and operators of equal "
                  "precedence group left to right. / is integer division truncating toward zero (-7 / 2 is "
                  "-3); no division by zero occurs.",
        "reference": "import re\nimport sys\n\ndef evaluate(s):\n    toks = re.findall(r'\\d+|[-+*/()]', s)\n    pos = 0\n\n"
                     "    def peek():\n        return toks[pos] if pos < len(toks) else None\n\n"
                     "    def expr():\n        nonlocal pos\n        v = term()\n        while peek() in ('+', '-'):\n"
                     "            op = toks[pos]\n            pos += 1\n            r = term()\n"
                     "            v = v + r if op == '+' else v - r\n        return v\n\n"
                     "    def term():\n        nonlocal pos\n        v = factor()\n        while peek() in ('*', '/'):\n"
                     "            op = toks[pos]\n            pos += 1\n            r = factor()\n"
                     "            if op == '*':\n                v *= r\n            else:\n"
                     "                q = abs(v) // abs(r)\n                v = q if (v >= 0) == (r >= 0) else -q\n"
                     "        return v\n\n"
                     "    def factor():\n        nonlocal pos\n        t = toks[pos]\n        pos += 1\n"
                     "        if t == '-':\n            return -factor()\n        if t == '(':\n"
                     "            v = expr()\n            pos += 1\n            return v\n        return int(t)\n\n"
                     "    return expr()\n\nfor line in sys.stdin:\n    if line.strip():\n        print(evaluate(line))\n",
        "public": ["1 + 2 * 3\n", "(1 + 2) * 3\n", "7 / 2\n"],
        "hidden": ["-7 / 2\n", "2 - 3 - 4\n", "((((5))))\n", "--4 * -(2 + 1)\n", "100 / 7 / 2\n",
                   "  12*(3-5)/4 + 8\n\n1-1\n", "(" * 100 + "1" + "+1)" * 100 + "\n",
                   "10 - 2 * 3 + 8 / (1 - 5)\n-(-(-9)) / 4 * 3\n", "123456789 * 987654321 - 1\n"],
    },
    # ----------------------------------------------------------------- difficulty 5
    {
        "id": "builtin/knapsack-01", "kind": "function", "difficulty": 5, "tags": ["dynamic-programming"],
        "entry_point": "knapsack",
        "prompt": "Write `knapsack(weights: list[int], values: list[int], capacity: int) -> int` returning the "
                  "largest total value of a set of items whose total weight is at most `capacity` "
                  "(capacity >= 0). Item i has positive weight weights[i] and non-negative value values[i]; "
                  "each item can be taken at most once. Expect up to 100 items and capacities up to 5000.",
        "reference": "def knapsack(weights, values, capacity):\n    dp = [0] * (capacity + 1)\n"
                     "    for w, v in zip(weights, values):\n        for c in range(capacity, w - 1, -1):\n"
                     "            if dp[c - w] + v > dp[c]:\n                dp[c] = dp[c - w] + v\n    return dp[capacity]\n",
        "public": [[[1, 3, 4, 5], [1, 4, 5, 7], 7], [[10], [5], 5], [[2, 3, 4], [3, 4, 5], 5]],
        "hidden": [[[], [], 10], [[1, 2, 3], [6, 10, 12], 5], [[5, 5, 5], [10, 10, 10], 15],
                   [[(i * 37) % 97 + 1 for i in range(100)], [(i * 53) % 89 + 1 for i in range(100)], 2500],
                   [[4, 8], [7, 9], 0], [[3, 4, 5, 9, 4], [3, 4, 4, 10, 4], 11],
                   [[(i * 71) % 200 + 50 for i in range(80)], [(i * 29) % 300 for i in range(80)], 4000]],
    },
    {
        "id": "builtin/word-break-count", "kind": "function", "difficulty": 5, "tags": ["dynamic-programming", "strings"],
        "entry_point": "count_segmentations",
        "prompt": "Write `count_segmentations(s: str, words: list[str]) -> int` returning the number of ways "
                  "to write `s` as a concatenation of words from `words` (a word may be used any number of "
                  "times; all words are non-empty; a word listed twice still counts once), modulo "
                  "1_000_000_007. Two ways differ when the sequences of pieces differ. The empty string has "
                  "exactly one segmentation. `s` may have thousands of characters.",
        "reference": "def count_segmentations(s, words):\n    mod = 1_000_000_007\n    ws = set(words)\n"
                     "    lens = sorted({len(w) for w in ws})\n    dp = [0] * (len(s) + 1)\n    dp[0] = 1\n"
                     "    for i in range(1, len(s) + 1):\n        t = 0\n        for k in lens:\n"
                     "            if k > i:\n                break\n            if dp[i - k] and s[i - k:i] in ws:\n"
                     "                t += dp[i - k]\n        dp[i] = t % mod\n    return dp[len(s)]\n",
        "public": [["catsanddog", ["cat", "cats", "and", "sand", "dog"]], ["applepenapple", ["apple", "pen"]],
                   ["catsandog", ["cats", "dog", "sand", "and", "cat"]]],
        "hidden": [["", ["a"]], ["aaaa", ["a", "aa"]], ["a" * 2000, ["a", "aa", "aaa", "aaaa"]],
                   ["ab" * 500, ["a", "b", "ab", "ba", "aba", "bab"]],
                   ["pineapplepenapple", ["apple", "pen", "applepen", "pine", "pineapple", "pen"]], ["xyz", ["x", "y"]],
                   ["a" * 3000 + "b", ["a", "aa", "aaa"]]],
    },
    {
        "id": "builtin/largest-histogram-rectangle", "kind": "function", "difficulty": 5, "tags": ["stacks", "arrays"],
        "entry_point": "largest_rectangle",
        "prompt": "Write `largest_rectangle(heights: list[int]) -> int`. The bars of a histogram have width 1 "
                  "and the non-negative heights `heights`, side by side. Return the largest area of an "
                  "axis-aligned rectangle lying entirely inside the bars (0 for an empty list). It must be "
                  "fast for lists of many thousands of bars.",
        "reference": "def largest_rectangle(heights):\n    stack = []\n    best = 0\n"
                     "    for i, h in enumerate([*heights, 0]):\n        start = i\n"
                     "        while stack and stack[-1][1] >= h:\n            start, top = stack.pop()\n"
                     "            best = max(best, top * (i - start))\n        stack.append((start, h))\n    return best\n",
        "public": [[[2, 1, 5, 6, 2, 3]], [[2, 4]], [[]]],
        "hidden": [[[0, 0]], [[5]], [list(range(1, 2001))], [[(i * 7919) % 1000 for i in range(3000)]], [[3] * 2000],
                   [[6, 2, 5, 4, 5, 1, 6]], [list(range(1500, 0, -1)) + list(range(1, 1501))]],
    },
    {
        "id": "builtin/dijkstra-distances", "kind": "stdio", "difficulty": 5, "tags": ["io", "graphs", "shortest-paths"],
        "prompt": "Standard input: a line `n m` (n >= 1 nodes numbered 0..n-1, m >= 0 directed edges), then m "
                  "lines `u v w`, an edge from u to v of non-negative integer weight w (parallel edges and "
                  "self-loops may occur). Print n lines: line i holds the length of a shortest path from node "
                  "0 to node i (0 for node 0 itself), or -1 when node i cannot be reached. Graphs may have "
                  "thousands of edges.",
        "reference": "import heapq\nimport sys\nd = sys.stdin.read().split()\nn, m = int(d[0]), int(d[1])\n"
                     "adj = [[] for _ in range(n)]\nfor i in range(m):\n"
                     "    u, v, w = int(d[2 + 3 * i]), int(d[3 + 3 * i]), int(d[4 + 3 * i])\n    adj[u].append((v, w))\n"
                     "dist = [-1] * n\ndist[0] = 0\nheap = [(0, 0)]\ndone = [False] * n\nwhile heap:\n"
                     "    du, u = heapq.heappop(heap)\n    if done[u]:\n        continue\n    done[u] = True\n"
                     "    for v, w in adj[u]:\n        if dist[v] == -1 or du + w < dist[v]:\n"
                     "            dist[v] = du + w\n            heapq.heappush(heap, (du + w, v))\n"
                     "print('\\n'.join(map(str, dist)))\n",
        "public": ["3 3\n0 1 4\n0 2 1\n2 1 2\n", "1 0\n", "2 0\n"],
        "hidden": ["4 2\n1 2 5\n2 3 1\n", "3 4\n0 1 10\n0 1 3\n1 1 0\n1 2 0\n",
                   "5 6\n0 1 0\n1 2 0\n2 3 0\n3 4 0\n0 4 1\n4 0 0\n",
                   "4 5\n0 1 1000000000\n1 2 1000000000\n2 3 1000000000\n0 3 3000000001\n3 2 5\n",
                   "800 2500\n" + "".join(f"{i % 800} {(i * 613 + i // 800 * 37 + 17) % 797} {(i * 31) % 97}\n"
                                          for i in range(2500)),
                   "6 7\n0 1 7\n0 2 9\n0 5 14\n1 2 10\n2 5 2\n5 4 9\n2 3 11\n"],
    },
]  # fmt: skip
