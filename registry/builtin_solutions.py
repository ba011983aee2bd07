"""Reference solutions of the builtin set's stdio tasks in other languages than Python (C++, Java,
Rust), by task id and language: ``python -m registry.build_builtin`` puts them in each task's
``solutions``; ``code-env tasks validate`` runs every one against the task's tests in the sandbox."""

from __future__ import annotations

SOLUTIONS: dict[str, dict[str, str]] = {
    "builtin/fizzbuzz-line": {
        "cpp": r"""#include <iostream>
#include <string>

int main() {
    long long n;
    if (!(std::cin >> n)) return 0;
    std::string out;
    for (long long i = 1; i <= n; ++i) {
        if (i % 15 == 0) {
            out += "FizzBuzz";
        } else if (i % 3 == 0) {
            out += "Fizz";
        } else if (i % 5 == 0) {
            out += "Buzz";
        } else {
            out += std::to_string(i);
        }
        out += '\n';
    }
    std::cout << out;
}
""",
        "java": r"""import java.io.BufferedReader;
import java.io.IOException;
import java.io.InputStreamReader;

public class Main {
    public static void main(String[] args) throws IOException {
        BufferedReader in = new BufferedReader(new InputStreamReader(System.in));
        String line = in.readLine();
        if (line == null || line.isBlank()) {
            return;
        }
        long n = Long.parseLong(line.trim());
        StringBuilder out = new StringBuilder();
        for (long i = 1; i <= n; i++) {
            if (i % 15 == 0) {
                out.append("FizzBuzz");
            } else if (i % 3 == 0) {
                out.append("Fizz");
            } else if (i % 5 == 0) {
                out.append("Buzz");
            } else {
                out.append(i);
            }
            out.append('\n');
        }
        System.out.print(out);
    }
}
""",
        "rust": r"""use std::io::{self, Write};

fn main() {
    let mut line = String::new();
    io::stdin().read_line(&mut line).unwrap();
    let n: i64 = match line.trim().parse() {
        Ok(n) => n,
        Err(_) => return,
    };
    let stdout = io::stdout();
    let mut out = io::BufWriter::new(stdout.lock());
    for i in 1..=n {
        if i % 15 == 0 {
            writeln!(out, "FizzBuzz").unwrap();
        } else if i % 3 == 0 {
            writeln!(out, "Fizz").unwrap();
        } else if i % 5 == 0 {
            writeln!(out, "Buzz").unwrap();
        } else {
            writeln!(out, "{}", i).unwrap();
        }
    }
}
""",
    },
    "builtin/word-frequency": {
        "cpp": r"""#include <algorithm>
#include <iostream>
#include <iterator>
#include <map>
#include <string>
#include <utility>
#include <vector>

int main() {
    std::string text((std::istreambuf_iterator<char>(std::cin)), std::istreambuf_iterator<char>());
    std::map<std::string, int> counts;
    std::string word;
    for (char ch : text) {
        if (ch >= 'A' && ch <= 'Z') ch = static_cast<char>(ch - 'A' + 'a');
        if (ch >= 'a' && ch <= 'z') {
            word += ch;
        } else if (!word.empty()) {
            ++counts[word];
            word.clear();
        }
    }
    if (!word.empty()) ++counts[word];
    // The map is in alphabetical order: a stable sort by count keeps ties alphabetical.
    std::vector<std::pair<std::string, int>> items(counts.begin(), counts.end());
    std::stable_sort(items.begin(), items.end(),
                     [](const auto& a, const auto& b) { return a.second > b.second; });
    std::string out;
    for (const auto& [w, n] : items) out += w + ' ' + std::to_string(n) + '\n';
    std::cout << out;
}
""",
        "java": r"""import java.io.IOException;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Locale;
import java.util.Map;

public class Main {
    public static void main(String[] args) throws IOException {
        String text = new String(System.in.readAllBytes(), StandardCharsets.UTF_8);
        Map<String, Integer> counts = new HashMap<>();
        for (String word : text.toLowerCase(Locale.ROOT).split("[^a-z]+")) {
            if (!word.isEmpty()) {
                counts.merge(word, 1, Integer::sum);
            }
        }
        List<Map.Entry<String, Integer>> items = new ArrayList<>(counts.entrySet());
        items.sort((a, b) -> a.getValue().equals(b.getValue())
                ? a.getKey().compareTo(b.getKey())
                : Integer.compare(b.getValue(), a.getValue()));
        StringBuilder out = new StringBuilder();
        for (Map.Entry<String, Integer> e : items) {
            out.append(e.getKey()).append(' ').append(e.getValue()).append('\n');
        }
        System.out.print(out);
    }
}
""",
        "rust": r"""use std::collections::HashMap;
use std::io::{self, Read, Write};

fn main() {
    let mut text = String::new();
    io::stdin().read_to_string(&mut text).unwrap();
    let lower = text.to_ascii_lowercase();
    let mut counts: HashMap<&str, usize> = HashMap::new();
    for word in lower.split(|c: char| !c.is_ascii_lowercase()).filter(|w| !w.is_empty()) {
        *counts.entry(word).or_insert(0) += 1;
    }
    let mut items: Vec<(&str, usize)> = counts.into_iter().collect();
    items.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(b.0)));
    let stdout = io::stdout();
    let mut out = io::BufWriter::new(stdout.lock());
    for (word, n) in items {
        writeln!(out, "{} {}", word, n).unwrap();
    }
}
""",
    },
    "builtin/shortest-path-grid": {
        "cpp": r"""#include <iostream>
#include <queue>
#include <string>
#include <utility>
#include <vector>

int main() {
    int h, w;
    std::cin >> h >> w;
    std::vector<std::string> g(h);
    for (auto& row : g) std::cin >> row;
    std::vector<std::vector<int>> dist(h, std::vector<int>(w, -1));
    std::queue<std::pair<int, int>> q;
    for (int r = 0; r < h && q.empty(); ++r) {
        for (int c = 0; c < w; ++c) {
            if (g[r][c] == 'S') {
                dist[r][c] = 0;
                q.emplace(r, c);
                break;
            }
        }
    }
    const int dr[] = {1, -1, 0, 0};
    const int dc[] = {0, 0, 1, -1};
    int answer = -1;
    while (!q.empty()) {
        auto [r, c] = q.front();
        q.pop();
        if (g[r][c] == 'G') {
            answer = dist[r][c];
            break;
        }
        for (int k = 0; k < 4; ++k) {
            int nr = r + dr[k], nc = c + dc[k];
            if (nr >= 0 && nr < h && nc >= 0 && nc < w && g[nr][nc] != '#' && dist[nr][nc] == -1) {
                dist[nr][nc] = dist[r][c] + 1;
                q.emplace(nr, nc);
            }
        }
    }
    std::cout << answer << '\n';
}
""",
        "java": r"""import java.io.IOException;
import java.nio.charset.StandardCharsets;
import java.util.ArrayDeque;
import java.util.Arrays;
import java.util.StringTokenizer;

public class Main {
    public static void main(String[] args) throws IOException {
        StringTokenizer st = new StringTokenizer(new String(System.in.readAllBytes(), StandardCharsets.UTF_8));
        int h = Integer.parseInt(st.nextToken());
        int w = Integer.parseInt(st.nextToken());
        char[][] g = new char[h][];
        for (int r = 0; r < h; r++) {
            g[r] = st.nextToken().toCharArray();
        }
        int[][] dist = new int[h][w];
        for (int[] row : dist) {
            Arrays.fill(row, -1);
        }
        ArrayDeque<int[]> queue = new ArrayDeque<>();
        search:
        for (int r = 0; r < h; r++) {
            for (int c = 0; c < w; c++) {
                if (g[r][c] == 'S') {
                    dist[r][c] = 0;
                    queue.add(new int[] {r, c});
                    break search;
                }
            }
        }
        int[][] moves = {{1, 0}, {-1, 0}, {0, 1}, {0, -1}};
        int answer = -1;
        while (!queue.isEmpty()) {
            int[] cell = queue.poll();
            int r = cell[0], c = cell[1];
            if (g[r][c] == 'G') {
                answer = dist[r][c];
                break;
            }
            for (int[] m : moves) {
                int nr = r + m[0], nc = c + m[1];
                if (nr >= 0 && nr < h && nc >= 0 && nc < w && g[nr][nc] != '#' && dist[nr][nc] == -1) {
                    dist[nr][nc] = dist[r][c] + 1;
                    queue.add(new int[] {nr, nc});
                }
            }
        }
        System.out.println(answer);
    }
}
""",
        "rust": r"""use std::collections::VecDeque;
use std::io::{self, Read};

fn main() {
    let mut input = String::new();
    io::stdin().read_to_string(&mut input).unwrap();
    let mut tokens = input.split_whitespace();
    let h: usize = tokens.next().unwrap().parse().unwrap();
    let w: usize = tokens.next().unwrap().parse().unwrap();
    let g: Vec<&[u8]> = tokens.take(h).map(|row| row.as_bytes()).collect();
    let mut dist = vec![vec![-1i64; w]; h];
    let mut queue = VecDeque::new();
    if let Some((r, c)) = (0..h).flat_map(|r| (0..w).map(move |c| (r, c))).find(|&(r, c)| g[r][c] == b'S') {
        dist[r][c] = 0;
        queue.push_back((r, c));
    }
    let mut answer = -1;
    while let Some((r, c)) = queue.pop_front() {
        if g[r][c] == b'G' {
            answer = dist[r][c];
            break;
        }
        let moves = [(r + 1, c), (r.wrapping_sub(1), c), (r, c + 1), (r, c.wrapping_sub(1))];
        for &(nr, nc) in &moves {
            if nr < h && nc < w && g[nr][nc] != b'#' && dist[nr][nc] == -1 {
                dist[nr][nc] = dist[r][c] + 1;
                queue.push_back((nr, nc));
            }
        }
    }
    println!("{}", answer);
}
""",
    },
    "builtin/pascal-row": {
        "cpp": r"""#include <cstddef>
#include <iostream>
#include <string>
#include <vector>

int main() {
    int n;
    std::cin >> n;
    std::vector<long long> row{1};
    for (int i = 0; i < n; ++i) {
        row.push_back(0);
        for (std::size_t j = row.size() - 1; j > 0; --j) row[j] += row[j - 1];
    }
    std::string out;
    for (std::size_t j = 0; j < row.size(); ++j) {
        if (j > 0) out += ' ';
        out += std::to_string(row[j]);
    }
    std::cout << out << '\n';
}
""",
        "java": r"""import java.io.BufferedReader;
import java.io.IOException;
import java.io.InputStreamReader;
import java.util.StringJoiner;

public class Main {
    public static void main(String[] args) throws IOException {
        BufferedReader in = new BufferedReader(new InputStreamReader(System.in));
        int n = Integer.parseInt(in.readLine().trim());
        long[] row = new long[Math.max(n, 0) + 1];
        row[0] = 1;
        for (int i = 1; i <= n; i++) {
            for (int j = i; j > 0; j--) {
                row[j] += row[j - 1];
            }
        }
        StringJoiner out = new StringJoiner(" ");
        for (long x : row) {
            out.add(Long.toString(x));
        }
        System.out.println(out);
    }
}
""",
        "rust": r"""use std::io;

fn main() {
    let mut line = String::new();
    io::stdin().read_line(&mut line).unwrap();
    let n: i64 = line.trim().parse().unwrap();
    let mut row: Vec<u64> = vec![1];
    for _ in 0..n {
        row.push(0);
        for j in (1..row.len()).rev() {
            row[j] += row[j - 1];
        }
    }
    let text: Vec<String> = row.iter().map(|x| x.to_string()).collect();
    println!("{}", text.join(" "));
}
""",
    },
    "builtin/stock-max-profit": {
        "cpp": r"""#include <algorithm>
#include <iostream>

int main() {
    long long best = 0, low = 0, x;
    bool seen = false;
    while (std::cin >> x) {
        if (!seen || x < low) {
            low = x;
            seen = true;
        }
        best = std::max(best, x - low);
    }
    std::cout << best << '\n';
}
""",
        "java": r"""import java.io.IOException;
import java.nio.charset.StandardCharsets;
import java.util.StringTokenizer;

public class Main {
    public static void main(String[] args) throws IOException {
        StringTokenizer st = new StringTokenizer(new String(System.in.readAllBytes(), StandardCharsets.UTF_8));
        long best = 0;
        long low = Long.MAX_VALUE;
        while (st.hasMoreTokens()) {
            long x = Long.parseLong(st.nextToken());
            low = Math.min(low, x);
            best = Math.max(best, x - low);
        }
        System.out.println(best);
    }
}
""",
        "rust": r"""use std::io::{self, Read};

fn main() {
    let mut input = String::new();
    io::stdin().read_to_string(&mut input).unwrap();
    let mut best: i64 = 0;
    let mut low: Option<i64> = None;
    for x in input.split_whitespace().map(|t| t.parse::<i64>().unwrap()) {
        let l = low.map_or(x, |l| l.min(x));
        low = Some(l);
        best = best.max(x - l);
    }
    println!("{}", best);
}
""",
    },
    "builtin/interval-scheduling": {
        "cpp": r"""#include <algorithm>
#include <iostream>
#include <utility>
#include <vector>

int main() {
    int n;
    std::cin >> n;
    std::vector<std::pair<long long, long long>> iv(n);  // (start, end)
    for (auto& [s, e] : iv) std::cin >> s >> e;
    std::sort(iv.begin(), iv.end(), [](const auto& a, const auto& b) { return a.second < b.second; });
    int count = 0;
    bool any = false;
    long long end = 0;
    for (const auto& [s, e] : iv) {
        if (!any || s >= end) {
            ++count;
            end = e;
            any = true;
        }
    }
    std::cout << count << '\n';
}
""",
        "java": r"""import java.io.IOException;
import java.nio.charset.StandardCharsets;
import java.util.Arrays;
import java.util.Comparator;
import java.util.StringTokenizer;

public class Main {
    public static void main(String[] args) throws IOException {
        StringTokenizer st = new StringTokenizer(new String(System.in.readAllBytes(), StandardCharsets.UTF_8));
        int n = Integer.parseInt(st.nextToken());
        long[][] iv = new long[n][2];
        for (long[] p : iv) {
            p[0] = Long.parseLong(st.nextToken());
            p[1] = Long.parseLong(st.nextToken());
        }
        Arrays.sort(iv, Comparator.comparingLong(p -> p[1]));
        int count = 0;
        long end = Long.MIN_VALUE;
        for (long[] p : iv) {
            if (count == 0 || p[0] >= end) {
                count++;
                end = p[1];
            }
        }
        System.out.println(count);
    }
}
""",
        "rust": r"""use std::io::{self, Read};

fn main() {
    let mut input = String::new();
    io::stdin().read_to_string(&mut input).unwrap();
    let mut nums = input.split_whitespace().map(|t| t.parse::<i64>().unwrap());
    let n = nums.next().unwrap() as usize;
    let mut iv: Vec<(i64, i64)> = (0..n).map(|_| (nums.next().unwrap(), nums.next().unwrap())).collect();
    iv.sort_by_key(|&(_, e)| e);
    let mut count = 0;
    let mut end: Option<i64> = None;
    for (s, e) in iv {
        if end.map_or(true, |end| s >= end) {
            count += 1;
            end = Some(e);
        }
    }
    println!("{}", count);
}
""",
    },
    "builtin/flood-fill": {
        "cpp": r"""#include <iostream>
#include <queue>
#include <string>
#include <utility>
#include <vector>

int main() {
    int h, w, r, c;
    char ch;
    std::cin >> h >> w >> r >> c >> ch;
    std::vector<std::string> g(h);
    for (auto& row : g) std::cin >> row;
    const char old = g[r][c];
    if (old != ch) {
        g[r][c] = ch;
        std::queue<std::pair<int, int>> q;
        q.emplace(r, c);
        const int dy[] = {1, -1, 0, 0};
        const int dx[] = {0, 0, 1, -1};
        while (!q.empty()) {
            auto [y, x] = q.front();
            q.pop();
            for (int k = 0; k < 4; ++k) {
                int ny = y + dy[k], nx = x + dx[k];
                if (ny >= 0 && ny < h && nx >= 0 && nx < w && g[ny][nx] == old) {
                    g[ny][nx] = ch;
                    q.emplace(ny, nx);
                }
            }
        }
    }
    std::string out;
    for (int i = 0; i < h; ++i) {
        if (i > 0) out += '\n';
        out += g[i];
    }
    std::cout << out << '\n';
}
""",
        "java": r"""import java.io.IOException;
import java.nio.charset.StandardCharsets;
import java.util.ArrayDeque;
import java.util.StringTokenizer;

public class Main {
    public static void main(String[] args) throws IOException {
        StringTokenizer st = new StringTokenizer(new String(System.in.readAllBytes(), StandardCharsets.UTF_8));
        int h = Integer.parseInt(st.nextToken());
        int w = Integer.parseInt(st.nextToken());
        int r = Integer.parseInt(st.nextToken());
        int c = Integer.parseInt(st.nextToken());
        char ch = st.nextToken().charAt(0);
        char[][] g = new char[h][];
        for (int i = 0; i < h; i++) {
            g[i] = st.nextToken().toCharArray();
        }
        char old = g[r][c];
        if (old != ch) {
            g[r][c] = ch;
            ArrayDeque<int[]> queue = new ArrayDeque<>();
            queue.add(new int[] {r, c});
            int[][] moves = {{1, 0}, {-1, 0}, {0, 1}, {0, -1}};
            while (!queue.isEmpty()) {
                int[] cell = queue.poll();
                for (int[] m : moves) {
                    int ny = cell[0] + m[0], nx = cell[1] + m[1];
                    if (ny >= 0 && ny < h && nx >= 0 && nx < w && g[ny][nx] == old) {
                        g[ny][nx] = ch;
                        queue.add(new int[] {ny, nx});
                    }
                }
            }
        }
        StringBuilder out = new StringBuilder();
        for (int i = 0; i < h; i++) {
            if (i > 0) {
                out.append('\n');
            }
            out.append(g[i]);
        }
        System.out.println(out);
    }
}
""",
        "rust": r"""use std::collections::VecDeque;
use std::io::{self, Read};

fn main() {
    let mut input = String::new();
    io::stdin().read_to_string(&mut input).unwrap();
    let mut tokens = input.split_whitespace();
    let mut next_num = || -> usize { tokens.next().unwrap().parse().unwrap() };
    let (h, w, r, c) = (next_num(), next_num(), next_num(), next_num());
    let ch = tokens.next().unwrap().chars().next().unwrap();
    let mut g: Vec<Vec<char>> = tokens.take(h).map(|row| row.chars().collect()).collect();
    let old = g[r][c];
    if old != ch {
        g[r][c] = ch;
        let mut queue = VecDeque::new();
        queue.push_back((r, c));
        while let Some((y, x)) = queue.pop_front() {
            let moves = [(y + 1, x), (y.wrapping_sub(1), x), (y, x + 1), (y, x.wrapping_sub(1))];
            for &(ny, nx) in &moves {
                if ny < h && nx < w && g[ny][nx] == old {
                    g[ny][nx] = ch;
                    queue.push_back((ny, nx));
                }
            }
        }
    }
    let rows: Vec<String> = g.iter().map(|row| row.iter().collect()).collect();
    println!("{}", rows.join("\n"));
}
""",
    },
    "builtin/count-islands": {
        "cpp": r"""#include <iostream>
#include <string>
#include <utility>
#include <vector>

int main() {
    int h, w;
    std::cin >> h >> w;
    std::vector<std::string> g(h);
    for (auto& row : g) std::cin >> row;
    const int dy[] = {1, -1, 0, 0};
    const int dx[] = {0, 0, 1, -1};
    int count = 0;
    std::vector<std::pair<int, int>> stack;
    for (int i = 0; i < h; ++i) {
        for (int j = 0; j < w; ++j) {
            if (g[i][j] != '1') continue;
            ++count;
            g[i][j] = '0';
            stack.emplace_back(i, j);
            while (!stack.empty()) {
                auto [y, x] = stack.back();
                stack.pop_back();
                for (int k = 0; k < 4; ++k) {
                    int ny = y + dy[k], nx = x + dx[k];
                    if (ny >= 0 && ny < h && nx >= 0 && nx < w && g[ny][nx] == '1') {
                        g[ny][nx] = '0';
                        stack.emplace_back(ny, nx);
                    }
                }
            }
        }
    }
    std::cout << count << '\n';
}
""",
        "java": r"""import java.io.IOException;
import java.nio.charset.StandardCharsets;
import java.util.ArrayDeque;
import java.util.StringTokenizer;

public class Main {
    public static void main(String[] args) throws IOException {
        StringTokenizer st = new StringTokenizer(new String(System.in.readAllBytes(), StandardCharsets.UTF_8));
        int h = Integer.parseInt(st.nextToken());
        int w = Integer.parseInt(st.nextToken());
        char[][] g = new char[h][];
        for (int i = 0; i < h; i++) {
            g[i] = st.nextToken().toCharArray();
        }
        int[][] moves = {{1, 0}, {-1, 0}, {0, 1}, {0, -1}};
        int count = 0;
        ArrayDeque<int[]> stack = new ArrayDeque<>();
        for (int i = 0; i < h; i++) {
            for (int j = 0; j < w; j++) {
                if (g[i][j] != '1') {
                    continue;
                }
                count++;
                g[i][j] = '0';
                stack.push(new int[] {i, j});
                while (!stack.isEmpty()) {
                    int[] cell = stack.pop();
                    for (int[] m : moves) {
                        int ny = cell[0] + m[0], nx = cell[1] + m[1];
                        if (ny >= 0 && ny < h && nx >= 0 && nx < w && g[ny][nx] == '1') {
                            g[ny][nx] = '0';
                            stack.push(new int[] {ny, nx});
                        }
                    }
                }
            }
        }
        System.out.println(count);
    }
}
""",
        "rust": r"""use std::io::{self, Read};

fn main() {
    let mut input = String::new();
    io::stdin().read_to_string(&mut input).unwrap();
    let mut tokens = input.split_whitespace();
    let h: usize = tokens.next().unwrap().parse().unwrap();
    let w: usize = tokens.next().unwrap().parse().unwrap();
    let mut g: Vec<Vec<u8>> = tokens.take(h).map(|row| row.as_bytes().to_vec()).collect();
    let mut count = 0;
    let mut stack = Vec::new();
    for i in 0..h {
        for j in 0..w {
            if g[i][j] != b'1' {
                continue;
            }
            count += 1;
            g[i][j] = b'0';
            stack.push((i, j));
            while let Some((y, x)) = stack.pop() {
                let moves = [(y + 1, x), (y.wrapping_sub(1), x), (y, x + 1), (y, x.wrapping_sub(1))];
                for &(ny, nx) in &moves {
                    if ny < h && nx < w && g[ny][nx] == b'1' {
                        g[ny][nx] = b'0';
                        stack.push((ny, nx));
                    }
                }
            }
        }
    }
    println!("{}", count);
}
""",
    },
    "builtin/evaluate-expression": {
        "cpp": r"""#include <cctype>
#include <cstddef>
#include <iostream>
#include <string>
#include <vector>

// Recursive descent over the tokens of one line: numbers and the characters + - * / ( ).
class Parser {
public:
    explicit Parser(const std::string& s) {
        for (std::size_t i = 0; i < s.size();) {
            if (std::isdigit(static_cast<unsigned char>(s[i]))) {
                std::size_t j = i;
                while (j < s.size() && std::isdigit(static_cast<unsigned char>(s[j]))) ++j;
                toks_.push_back(s.substr(i, j - i));
                i = j;
            } else {
                if (std::string("+-*/()").find(s[i]) != std::string::npos) toks_.emplace_back(1, s[i]);
                ++i;
            }
        }
    }

    long long evaluate() { return expr(); }

private:
    std::vector<std::string> toks_;
    std::size_t pos_ = 0;

    char peek() const { return pos_ < toks_.size() ? toks_[pos_][0] : '\0'; }

    long long expr() {
        long long v = term();
        while (peek() == '+' || peek() == '-') {
            char op = toks_[pos_++][0];
            long long r = term();
            v = op == '+' ? v + r : v - r;
        }
        return v;
    }

    long long term() {
        long long v = factor();
        while (peek() == '*' || peek() == '/') {
            char op = toks_[pos_++][0];
            long long r = factor();
            v = op == '*' ? v * r : v / r;  // C++ division truncates toward zero
        }
        return v;
    }

    long long factor() {
        const std::string t = toks_[pos_++];
        if (t == "-") return -factor();
        if (t == "(") {
            long long v = expr();
            ++pos_;  // ')'
            return v;
        }
        return std::stoll(t);
    }
};

int main() {
    std::string line, out;
    while (std::getline(std::cin, line)) {
        if (line.find_first_not_of(" \t\r\n\v\f") == std::string::npos) continue;
        out += std::to_string(Parser(line).evaluate()) + '\n';
    }
    std::cout << out;
}
""",
        "java": r"""import java.io.BufferedReader;
import java.io.IOException;
import java.io.InputStreamReader;
import java.util.ArrayList;
import java.util.List;
import java.util.regex.Matcher;
import java.util.regex.Pattern;

public class Main {
    private static final Pattern TOKEN = Pattern.compile("\\d+|[-+*/()]");

    private final List<String> toks = new ArrayList<>();
    private int pos = 0;

    private Main(String line) {
        Matcher m = TOKEN.matcher(line);
        while (m.find()) {
            toks.add(m.group());
        }
    }

    private String peek() {
        return pos < toks.size() ? toks.get(pos) : "";
    }

    private long expr() {
        long v = term();
        while (peek().equals("+") || peek().equals("-")) {
            String op = toks.get(pos++);
            long r = term();
            v = op.equals("+") ? v + r : v - r;
        }
        return v;
    }

    private long term() {
        long v = factor();
        while (peek().equals("*") || peek().equals("/")) {
            String op = toks.get(pos++);
            long r = factor();
            v = op.equals("*") ? v * r : v / r;  // Java division truncates toward zero
        }
        return v;
    }

    private long factor() {
        String t = toks.get(pos++);
        if (t.equals("-")) {
            return -factor();
        }
        if (t.equals("(")) {
            long v = expr();
            pos++;  // ')'
            return v;
        }
        return Long.parseLong(t);
    }

    public static void main(String[] args) throws IOException {
        BufferedReader in = new BufferedReader(new InputStreamReader(System.in));
        StringBuilder out = new StringBuilder();
        for (String line = in.readLine(); line != null; line = in.readLine()) {
            if (!line.isBlank()) {
                out.append(new Main(line).expr()).append('\n');
            }
        }
        System.out.print(out);
    }
}
""",
        "rust": r"""use std::io::{self, BufRead, Write};

#[derive(Clone, Copy)]
enum Tok {
    Num(i64),
    Op(u8),
}

// Recursive descent over the tokens of one line: numbers and the characters + - * / ( ).
struct Parser {
    toks: Vec<Tok>,
    pos: usize,
}

impl Parser {
    fn new(line: &str) -> Parser {
        let b = line.as_bytes();
        let mut toks = Vec::new();
        let mut i = 0;
        while i < b.len() {
            if b[i].is_ascii_digit() {
                let start = i;
                while i < b.len() && b[i].is_ascii_digit() {
                    i += 1;
                }
                toks.push(Tok::Num(line[start..i].parse().unwrap()));
            } else {
                if b"+-*/()".contains(&b[i]) {
                    toks.push(Tok::Op(b[i]));
                }
                i += 1;
            }
        }
        Parser { toks, pos: 0 }
    }

    fn peek_op(&self) -> Option<u8> {
        match self.toks.get(self.pos) {
            Some(Tok::Op(c)) => Some(*c),
            _ => None,
        }
    }

    fn expr(&mut self) -> i64 {
        let mut v = self.term();
        while let Some(op @ (b'+' | b'-')) = self.peek_op() {
            self.pos += 1;
            let r = self.term();
            v = if op == b'+' { v + r } else { v - r };
        }
        v
    }

    fn term(&mut self) -> i64 {
        let mut v = self.factor();
        while let Some(op @ (b'*' | b'/')) = self.peek_op() {
            self.pos += 1;
            let r = self.factor();
            // Rust's integer division truncates toward zero.
            v = if op == b'*' { v * r } else { v / r };
        }
        v
    }

    fn factor(&mut self) -> i64 {
        let tok = self.toks[self.pos];
        self.pos += 1;
        match tok {
            Tok::Num(n) => n,
            Tok::Op(b'-') => -self.factor(),
            Tok::Op(b'(') => {
                let v = self.expr();
                self.pos += 1; // ')'
                v
            }
            Tok::Op(c) => panic!("unexpected {}", c as char),
        }
    }
}

fn main() {
    let stdin = io::stdin();
    let stdout = io::stdout();
    let mut out = io::BufWriter::new(stdout.lock());
    for line in stdin.lock().lines() {
        let line = line.unwrap();
        if !line.trim().is_empty() {
            writeln!(out, "{}", Parser::new(&line).expr()).unwrap();
        }
    }
}
""",
    },
    "builtin/dijkstra-distances": {
        "cpp": r"""#include <functional>
#include <iostream>
#include <queue>
#include <string>
#include <utility>
#include <vector>

int main() {
    std::ios::sync_with_stdio(false);
    std::cin.tie(nullptr);
    int n, m;
    std::cin >> n >> m;
    std::vector<std::vector<std::pair<int, long long>>> adj(n);
    for (int i = 0; i < m; ++i) {
        int u, v;
        long long w;
        std::cin >> u >> v >> w;
        adj[u].emplace_back(v, w);
    }
    std::vector<long long> dist(n, -1);
    std::vector<bool> done(n, false);
    using Item = std::pair<long long, int>;
    std::priority_queue<Item, std::vector<Item>, std::greater<Item>> heap;
    dist[0] = 0;
    heap.emplace(0, 0);
    while (!heap.empty()) {
        auto [du, u] = heap.top();
        heap.pop();
        if (done[u]) continue;
        done[u] = true;
        for (auto [v, w] : adj[u]) {
            if (dist[v] == -1 || du + w < dist[v]) {
                dist[v] = du + w;
                heap.emplace(dist[v], v);
            }
        }
    }
    std::string out;
    for (long long d : dist) out += std::to_string(d) + '\n';
    std::cout << out;
}
""",
        "java": r"""import java.io.IOException;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import java.util.PriorityQueue;
import java.util.StringTokenizer;

public class Main {
    public static void main(String[] args) throws IOException {
        StringTokenizer st = new StringTokenizer(new String(System.in.readAllBytes(), StandardCharsets.UTF_8));
        int n = Integer.parseInt(st.nextToken());
        int m = Integer.parseInt(st.nextToken());
        List<List<long[]>> adj = new ArrayList<>();
        for (int i = 0; i < n; i++) {
            adj.add(new ArrayList<>());
        }
        for (int i = 0; i < m; i++) {
            int u = Integer.parseInt(st.nextToken());
            long v = Long.parseLong(st.nextToken());
            long w = Long.parseLong(st.nextToken());
            adj.get(u).add(new long[] {v, w});
        }
        long[] dist = new long[n];
        Arrays.fill(dist, -1);
        boolean[] done = new boolean[n];
        PriorityQueue<long[]> heap = new PriorityQueue<>((a, b) -> Long.compare(a[0], b[0]));
        dist[0] = 0;
        heap.add(new long[] {0, 0});
        while (!heap.isEmpty()) {
            long[] top = heap.poll();
            long du = top[0];
            int u = (int) top[1];
            if (done[u]) {
                continue;
            }
            done[u] = true;
            for (long[] e : adj.get(u)) {
                int v = (int) e[0];
                if (dist[v] == -1 || du + e[1] < dist[v]) {
                    dist[v] = du + e[1];
                    heap.add(new long[] {dist[v], v});
                }
            }
        }
        StringBuilder out = new StringBuilder();
        for (long d : dist) {
            out.append(d).append('\n');
        }
        System.out.print(out);
    }
}
""",
        "rust": r"""use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::io::{self, Read, Write};

fn main() {
    let mut input = String::new();
    io::stdin().read_to_string(&mut input).unwrap();
    let mut nums = input.split_whitespace().map(|t| t.parse::<i64>().unwrap());
    let n = nums.next().unwrap() as usize;
    let m = nums.next().unwrap() as usize;
    let mut adj: Vec<Vec<(usize, i64)>> = vec![Vec::new(); n];
    for _ in 0..m {
        let u = nums.next().unwrap() as usize;
        let v = nums.next().unwrap() as usize;
        let w = nums.next().unwrap();
        adj[u].push((v, w));
    }
    let mut dist: Vec<Option<i64>> = vec![None; n];
    let mut done = vec![false; n];
    let mut heap = BinaryHeap::new();
    dist[0] = Some(0);
    heap.push(Reverse((0i64, 0usize)));
    while let Some(Reverse((du, u))) = heap.pop() {
        if done[u] {
            continue;
        }
        done[u] = true;
        for &(v, w) in &adj[u] {
            if dist[v].map_or(true, |dv| du + w < dv) {
                dist[v] = Some(du + w);
                heap.push(Reverse((du + w, v)));
            }
        }
    }
    let stdout = io::stdout();
    let mut out = io::BufWriter::new(stdout.lock());
    for d in dist {
        writeln!(out, "{}", d.unwrap_or(-1)).unwrap();
    }
}
""",
    },
    "builtin/column-sums": {
        "cpp": r"""#include <cstddef>
#include <iostream>
#include <sstream>
#include <string>
#include <vector>

int main() {
    std::vector<long long> sums;
    std::string line;
    while (std::getline(std::cin, line)) {
        std::istringstream fields(line);
        long long x;
        for (std::size_t i = 0; fields >> x; ++i) {
            if (i == sums.size()) sums.push_back(0);
            sums[i] += x;
        }
    }
    std::string out;
    for (std::size_t i = 0; i < sums.size(); ++i) {
        if (i > 0) out += ' ';
        out += std::to_string(sums[i]);
    }
    std::cout << out << '\n';
}
""",
        "java": r"""import java.io.BufferedReader;
import java.io.IOException;
import java.io.InputStreamReader;
import java.util.ArrayList;
import java.util.List;
import java.util.StringJoiner;
import java.util.StringTokenizer;

public class Main {
    public static void main(String[] args) throws IOException {
        BufferedReader in = new BufferedReader(new InputStreamReader(System.in));
        List<Long> sums = new ArrayList<>();
        for (String line = in.readLine(); line != null; line = in.readLine()) {
            StringTokenizer st = new StringTokenizer(line);
            for (int i = 0; st.hasMoreTokens(); i++) {
                long x = Long.parseLong(st.nextToken());
                if (i == sums.size()) {
                    sums.add(0L);
                }
                sums.set(i, sums.get(i) + x);
            }
        }
        StringJoiner out = new StringJoiner(" ");
        for (long s : sums) {
            out.add(Long.toString(s));
        }
        System.out.println(out);
    }
}
""",
        "rust": r"""use std::io::{self, Read};

fn main() {
    let mut input = String::new();
    io::stdin().read_to_string(&mut input).unwrap();
    let mut sums: Vec<i64> = Vec::new();
    for line in input.lines() {
        for (i, tok) in line.split_whitespace().enumerate() {
            if i == sums.len() {
                sums.push(0);
            }
            sums[i] += tok.parse::<i64>().unwrap();
        }
    }
    let text: Vec<String> = sums.iter().map(|s| s.to_string()).collect();
    println!("{}", text.join(" "));
}
""",
    },
    "builtin/int-histogram": {
        "cpp": r"""#include <algorithm>
#include <iostream>
#include <map>
#include <string>

int main() {
    std::map<long long, long long> counts;
    long long x;
    while (std::cin >> x) ++counts[x];
    long long top = 0;
    for (const auto& [v, c] : counts) top = std::max(top, c);
    std::string out;
    for (const auto& [v, c] : counts) {
        long long len = top <= 20 ? c : std::max(1LL, c * 20 / top);
        out += std::to_string(v) + ' ' + std::string(len, '*') + '\n';
    }
    std::cout << out;
}
""",
        "java": r"""import java.io.IOException;
import java.nio.charset.StandardCharsets;
import java.util.Map;
import java.util.StringTokenizer;
import java.util.TreeMap;

public class Main {
    public static void main(String[] args) throws IOException {
        StringTokenizer st = new StringTokenizer(new String(System.in.readAllBytes(), StandardCharsets.UTF_8));
        TreeMap<Long, Long> counts = new TreeMap<>();
        while (st.hasMoreTokens()) {
            counts.merge(Long.parseLong(st.nextToken()), 1L, Long::sum);
        }
        long top = 0;
        for (long c : counts.values()) {
            top = Math.max(top, c);
        }
        StringBuilder out = new StringBuilder();
        for (Map.Entry<Long, Long> e : counts.entrySet()) {
            long c = e.getValue();
            long len = top <= 20 ? c : Math.max(1, c * 20 / top);
            out.append(e.getKey()).append(' ').append("*".repeat((int) len)).append('\n');
        }
        System.out.print(out);
    }
}
""",
        "rust": r"""use std::collections::BTreeMap;
use std::io::{self, Read, Write};

fn main() {
    let mut input = String::new();
    io::stdin().read_to_string(&mut input).unwrap();
    let mut counts: BTreeMap<i64, usize> = BTreeMap::new();
    for x in input.split_whitespace().map(|t| t.parse::<i64>().unwrap()) {
        *counts.entry(x).or_insert(0) += 1;
    }
    let top = counts.values().copied().max().unwrap_or(0);
    let stdout = io::stdout();
    let mut out = io::BufWriter::new(stdout.lock());
    for (v, &c) in &counts {
        let len = if top <= 20 { c } else { (c * 20 / top).max(1) };
        writeln!(out, "{} {}", v, "*".repeat(len)).unwrap();
    }
}
""",
    },
    "builtin/csv-transpose": {
        "cpp": r"""#include <algorithm>
#include <cstddef>
#include <iostream>
#include <string>
#include <vector>

int main() {
    std::vector<std::vector<std::string>> rows;
    std::string line;
    while (std::getline(std::cin, line)) {
        if (!line.empty() && line.back() == '\r') line.pop_back();
        if (line.find_first_not_of(" \t\r\n\v\f") == std::string::npos) continue;
        std::vector<std::string> fields;
        std::size_t start = 0;
        for (std::size_t comma; (comma = line.find(',', start)) != std::string::npos; start = comma + 1) {
            fields.push_back(line.substr(start, comma - start));
        }
        fields.push_back(line.substr(start));
        rows.push_back(fields);
    }
    std::size_t cols = rows.empty() ? 0 : rows[0].size();
    for (const auto& row : rows) cols = std::min(cols, row.size());
    std::string out;
    for (std::size_t j = 0; j < cols; ++j) {
        for (std::size_t i = 0; i < rows.size(); ++i) {
            if (i > 0) out += ',';
            out += rows[i][j];
        }
        out += '\n';
    }
    std::cout << out;
}
""",
        "java": r"""import java.io.BufferedReader;
import java.io.IOException;
import java.io.InputStreamReader;
import java.util.ArrayList;
import java.util.List;
import java.util.StringJoiner;

public class Main {
    public static void main(String[] args) throws IOException {
        BufferedReader in = new BufferedReader(new InputStreamReader(System.in));
        List<String[]> rows = new ArrayList<>();
        for (String line = in.readLine(); line != null; line = in.readLine()) {
            if (!line.isBlank()) {
                rows.add(line.split(",", -1));  // -1: keep trailing empty fields
            }
        }
        int cols = rows.isEmpty() ? 0 : Integer.MAX_VALUE;
        for (String[] row : rows) {
            cols = Math.min(cols, row.length);
        }
        StringBuilder out = new StringBuilder();
        for (int j = 0; j < cols; j++) {
            StringJoiner col = new StringJoiner(",");
            for (String[] row : rows) {
                col.add(row[j]);
            }
            out.append(col).append('\n');
        }
        System.out.print(out);
    }
}
""",
        "rust": r"""use std::io::{self, Read, Write};

fn main() {
    let mut input = String::new();
    io::stdin().read_to_string(&mut input).unwrap();
    let rows: Vec<Vec<&str>> = input
        .lines()
        .filter(|line| !line.trim().is_empty())
        .map(|line| line.split(',').collect())
        .collect();
    let cols = rows.iter().map(|row| row.len()).min().unwrap_or(0);
    let stdout = io::stdout();
    let mut out = io::BufWriter::new(stdout.lock());
    for j in 0..cols {
        let col: Vec<&str> = rows.iter().map(|row| row[j]).collect();
        writeln!(out, "{}", col.join(",")).unwrap();
    }
}
""",
    },
    "builtin/lru-cache": {
        "cpp": r"""#include <cstddef>
#include <iostream>
#include <iterator>
#include <list>
#include <sstream>
#include <string>
#include <unordered_map>
#include <utility>

int main() {
    std::string line;
    if (!std::getline(std::cin, line)) return 0;
    const std::size_t capacity = std::stoul(line);
    using Entry = std::pair<std::string, std::string>;  // (key, value)
    std::list<Entry> order;  // least recently used first
    std::unordered_map<std::string, std::list<Entry>::iterator> where;
    std::string out;
    while (std::getline(std::cin, line)) {
        std::istringstream parts(line);
        std::string cmd, key, value;
        if (!(parts >> cmd)) continue;
        parts >> key;
        auto it = where.find(key);
        if (cmd == "get") {
            if (it == where.end()) {
                out += "MISS\n";
            } else {
                order.splice(order.end(), order, it->second);
                out += it->second->second + '\n';
            }
            continue;
        }
        parts >> value;
        if (it != where.end()) {
            order.splice(order.end(), order, it->second);
            it->second->second = value;
        } else {
            if (where.size() == capacity) {
                out += "evict " + order.front().first + '\n';
                where.erase(order.front().first);
                order.pop_front();
            }
            order.emplace_back(key, value);
            where[key] = std::prev(order.end());
        }
    }
    std::cout << out;
}
""",
        "java": r"""import java.io.BufferedReader;
import java.io.IOException;
import java.io.InputStreamReader;
import java.util.LinkedHashMap;
import java.util.StringTokenizer;

public class Main {
    public static void main(String[] args) throws IOException {
        BufferedReader in = new BufferedReader(new InputStreamReader(System.in));
        String first = in.readLine();
        if (first == null) {
            return;
        }
        int capacity = Integer.parseInt(first.trim());
        // Access order: get and put of a present key make it the most recently used (the last).
        LinkedHashMap<String, String> cache = new LinkedHashMap<>(16, 0.75f, true);
        StringBuilder out = new StringBuilder();
        for (String line = in.readLine(); line != null; line = in.readLine()) {
            StringTokenizer st = new StringTokenizer(line);
            if (!st.hasMoreTokens()) {
                continue;
            }
            String cmd = st.nextToken();
            String key = st.nextToken();
            if (cmd.equals("get")) {
                String value = cache.get(key);
                out.append(value == null ? "MISS" : value).append('\n');
            } else {
                String value = st.nextToken();
                if (!cache.containsKey(key) && cache.size() == capacity) {
                    String eldest = cache.keySet().iterator().next();
                    cache.remove(eldest);
                    out.append("evict ").append(eldest).append('\n');
                }
                cache.put(key, value);
            }
        }
        System.out.print(out);
    }
}
""",
        "rust": r"""use std::collections::{BTreeMap, HashMap};
use std::io::{self, Read, Write};

fn main() {
    let mut input = String::new();
    io::stdin().read_to_string(&mut input).unwrap();
    let mut lines = input.lines();
    let capacity: usize = match lines.next() {
        Some(line) => line.trim().parse().unwrap(),
        None => return,
    };
    let mut cache: HashMap<&str, (&str, u64)> = HashMap::new(); // key -> (value, last use)
    let mut by_use: BTreeMap<u64, &str> = BTreeMap::new(); // last use -> key, oldest first
    let mut clock: u64 = 0;
    let stdout = io::stdout();
    let mut out = io::BufWriter::new(stdout.lock());
    for line in lines {
        let parts: Vec<&str> = line.split_whitespace().collect();
        if parts.is_empty() {
            continue;
        }
        let key = parts[1];
        clock += 1;
        if parts[0] == "get" {
            match cache.get_mut(key) {
                Some(entry) => {
                    by_use.remove(&entry.1);
                    entry.1 = clock;
                    by_use.insert(clock, key);
                    writeln!(out, "{}", entry.0).unwrap();
                }
                None => writeln!(out, "MISS").unwrap(),
            }
            continue;
        }
        let value = parts[2];
        if let Some(&(_, used)) = cache.get(key) {
            by_use.remove(&used);
        } else if cache.len() == capacity {
            let oldest = *by_use.keys().next().unwrap();
            let evicted = by_use.remove(&oldest).unwrap();
            cache.remove(evicted);
            writeln!(out, "evict {}", evicted).unwrap();
        }
        cache.insert(key, (value, clock));
        by_use.insert(clock, key);
    }
}
""",
    },
    "builtin/bank-ledger": {
        "cpp": r"""#include <iostream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

int main() {
    std::map<std::string, long long> acc;
    std::string line, out;
    int n = 0;
    while (std::getline(std::cin, line)) {
        std::istringstream in(line);
        std::vector<std::string> p;
        for (std::string tok; in >> tok;) p.push_back(tok);
        if (p.empty()) continue;
        ++n;
        const std::string& op = p[0];
        bool ok = true;
        if (op == "open") {
            ok = acc.emplace(p[1], 0).second;
        } else if (op == "deposit") {
            auto it = acc.find(p[1]);
            ok = it != acc.end();
            if (ok) it->second += std::stoll(p[2]);
        } else if (op == "withdraw") {
            auto it = acc.find(p[1]);
            ok = it != acc.end() && it->second >= std::stoll(p[2]);
            if (ok) it->second -= std::stoll(p[2]);
        } else if (op == "transfer") {
            long long x = std::stoll(p[3]);
            auto a = acc.find(p[1]);
            auto b = acc.find(p[2]);
            ok = a != acc.end() && b != acc.end() && a != b && a->second >= x;
            if (ok) {
                a->second -= x;
                b->second += x;
            }
        } else if (op == "balance") {
            auto it = acc.find(p[1]);
            ok = it != acc.end();
            if (ok) out += p[1] + ' ' + std::to_string(it->second) + '\n';
        }
        if (!ok) out += "error " + std::to_string(n) + '\n';
    }
    out += "---\n";
    for (const auto& [name, balance] : acc) out += name + ' ' + std::to_string(balance) + '\n';
    std::cout << out;
}
""",
        "java": r"""import java.io.BufferedReader;
import java.io.IOException;
import java.io.InputStreamReader;
import java.util.Map;
import java.util.TreeMap;

public class Main {
    public static void main(String[] args) throws IOException {
        BufferedReader in = new BufferedReader(new InputStreamReader(System.in));
        TreeMap<String, Long> acc = new TreeMap<>();
        StringBuilder out = new StringBuilder();
        int n = 0;
        for (String line = in.readLine(); line != null; line = in.readLine()) {
            String trimmed = line.trim();
            if (trimmed.isEmpty()) {
                continue;
            }
            String[] p = trimmed.split("\\s+");
            n++;
            boolean ok = true;
            switch (p[0]) {
                case "open" -> {
                    ok = !acc.containsKey(p[1]);
                    if (ok) {
                        acc.put(p[1], 0L);
                    }
                }
                case "deposit" -> {
                    ok = acc.containsKey(p[1]);
                    if (ok) {
                        acc.merge(p[1], Long.parseLong(p[2]), Long::sum);
                    }
                }
                case "withdraw" -> {
                    ok = acc.containsKey(p[1]) && acc.get(p[1]) >= Long.parseLong(p[2]);
                    if (ok) {
                        acc.merge(p[1], -Long.parseLong(p[2]), Long::sum);
                    }
                }
                case "transfer" -> {
                    String a = p[1];
                    String b = p[2];
                    long x = Long.parseLong(p[3]);
                    ok = acc.containsKey(a) && acc.containsKey(b) && !a.equals(b) && acc.get(a) >= x;
                    if (ok) {
                        acc.merge(a, -x, Long::sum);
                        acc.merge(b, x, Long::sum);
                    }
                }
                case "balance" -> {
                    ok = acc.containsKey(p[1]);
                    if (ok) {
                        out.append(p[1]).append(' ').append(acc.get(p[1])).append('\n');
                    }
                }
                default -> {
                }
            }
            if (!ok) {
                out.append("error ").append(n).append('\n');
            }
        }
        out.append("---\n");
        for (Map.Entry<String, Long> e : acc.entrySet()) {
            out.append(e.getKey()).append(' ').append(e.getValue()).append('\n');
        }
        System.out.print(out);
    }
}
""",
        "rust": r"""use std::collections::BTreeMap;
use std::io::{self, Read, Write};

fn amount(tok: &str) -> i64 {
    tok.parse().unwrap()
}

fn main() {
    let mut input = String::new();
    io::stdin().read_to_string(&mut input).unwrap();
    let stdout = io::stdout();
    let mut out = io::BufWriter::new(stdout.lock());
    let mut acc: BTreeMap<&str, i64> = BTreeMap::new();
    let mut n = 0;
    for line in input.lines() {
        let p: Vec<&str> = line.split_whitespace().collect();
        if p.is_empty() {
            continue;
        }
        n += 1;
        let ok = match p[0] {
            "open" => {
                if acc.contains_key(p[1]) {
                    false
                } else {
                    acc.insert(p[1], 0);
                    true
                }
            }
            "deposit" => match acc.get_mut(p[1]) {
                Some(balance) => {
                    *balance += amount(p[2]);
                    true
                }
                None => false,
            },
            "withdraw" => match acc.get_mut(p[1]) {
                Some(balance) if *balance >= amount(p[2]) => {
                    *balance -= amount(p[2]);
                    true
                }
                _ => false,
            },
            "transfer" => {
                let (a, b, x) = (p[1], p[2], amount(p[3]));
                let ok = acc.contains_key(b) && a != b && acc.get(a).map_or(false, |&bal| bal >= x);
                if ok {
                    *acc.get_mut(a).unwrap() -= x;
                    *acc.get_mut(b).unwrap() += x;
                }
                ok
            }
            "balance" => match acc.get(p[1]) {
                Some(balance) => {
                    writeln!(out, "{} {}", p[1], balance).unwrap();
                    true
                }
                None => false,
            },
            _ => true,
        };
        if !ok {
            writeln!(out, "error {}", n).unwrap();
        }
    }
    writeln!(out, "---").unwrap();
    for (name, balance) in &acc {
        writeln!(out, "{} {}", name, balance).unwrap();
    }
}
""",
    },
    "builtin/cheapest-route": {
        "cpp": r"""#include <algorithm>
#include <functional>
#include <iostream>
#include <limits>
#include <queue>
#include <string>
#include <utility>
#include <vector>

int main() {
    std::ios::sync_with_stdio(false);
    std::cin.tie(nullptr);
    int n, m;
    std::cin >> n >> m;
    std::vector<std::vector<std::pair<int, long long>>> adj(n + 1);
    for (int i = 0; i < m; ++i) {
        int u, v;
        long long w;
        std::cin >> u >> v >> w;
        adj[u].emplace_back(v, w);
        adj[v].emplace_back(u, w);
    }
    const long long kInf = std::numeric_limits<long long>::max();
    std::vector<long long> dist(n + 1, kInf);
    std::vector<int> prev(n + 1, 0);
    using Item = std::pair<long long, int>;
    std::priority_queue<Item, std::vector<Item>, std::greater<Item>> heap;
    dist[1] = 0;
    heap.emplace(0, 1);
    while (!heap.empty()) {
        auto [d, u] = heap.top();
        heap.pop();
        if (d > dist[u]) continue;
        for (auto [v, w] : adj[u]) {
            if (d + w < dist[v]) {
                dist[v] = d + w;
                prev[v] = u;
                heap.emplace(dist[v], v);
            }
        }
    }
    if (dist[n] == kInf) {
        std::cout << -1 << '\n';
        return 0;
    }
    std::vector<int> path{n};
    while (path.back() != 1) path.push_back(prev[path.back()]);
    std::reverse(path.begin(), path.end());
    std::string out = std::to_string(dist[n]) + '\n';
    for (std::size_t i = 0; i < path.size(); ++i) {
        if (i > 0) out += ' ';
        out += std::to_string(path[i]);
    }
    std::cout << out << '\n';
}
""",
        "java": r"""import java.io.IOException;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.Collections;
import java.util.List;
import java.util.PriorityQueue;
import java.util.StringJoiner;
import java.util.StringTokenizer;

public class Main {
    public static void main(String[] args) throws IOException {
        StringTokenizer st = new StringTokenizer(new String(System.in.readAllBytes(), StandardCharsets.UTF_8));
        int n = Integer.parseInt(st.nextToken());
        int m = Integer.parseInt(st.nextToken());
        List<List<long[]>> adj = new ArrayList<>();
        for (int i = 0; i <= n; i++) {
            adj.add(new ArrayList<>());
        }
        for (int i = 0; i < m; i++) {
            int u = Integer.parseInt(st.nextToken());
            int v = Integer.parseInt(st.nextToken());
            long w = Long.parseLong(st.nextToken());
            adj.get(u).add(new long[] {v, w});
            adj.get(v).add(new long[] {u, w});
        }
        long[] dist = new long[n + 1];
        Arrays.fill(dist, Long.MAX_VALUE);
        int[] prev = new int[n + 1];
        // Entries (distance, node), the smallest distance first, then the smallest node.
        PriorityQueue<long[]> heap = new PriorityQueue<>(
                (a, b) -> a[0] != b[0] ? Long.compare(a[0], b[0]) : Long.compare(a[1], b[1]));
        dist[1] = 0;
        heap.add(new long[] {0, 1});
        while (!heap.isEmpty()) {
            long[] top = heap.poll();
            long d = top[0];
            int u = (int) top[1];
            if (d > dist[u]) {
                continue;
            }
            for (long[] e : adj.get(u)) {
                int v = (int) e[0];
                if (d + e[1] < dist[v]) {
                    dist[v] = d + e[1];
                    prev[v] = u;
                    heap.add(new long[] {dist[v], v});
                }
            }
        }
        if (dist[n] == Long.MAX_VALUE) {
            System.out.println(-1);
            return;
        }
        List<Integer> path = new ArrayList<>();
        path.add(n);
        while (path.get(path.size() - 1) != 1) {
            path.add(prev[path.get(path.size() - 1)]);
        }
        Collections.reverse(path);
        StringJoiner nodes = new StringJoiner(" ");
        for (int v : path) {
            nodes.add(Integer.toString(v));
        }
        System.out.println(dist[n]);
        System.out.println(nodes);
    }
}
""",
        "rust": r"""use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::io::{self, Read};

fn main() {
    let mut input = String::new();
    io::stdin().read_to_string(&mut input).unwrap();
    let mut nums = input.split_whitespace().map(|t| t.parse::<i64>().unwrap());
    let n = nums.next().unwrap() as usize;
    let m = nums.next().unwrap() as usize;
    let mut adj: Vec<Vec<(usize, i64)>> = vec![Vec::new(); n + 1];
    for _ in 0..m {
        let u = nums.next().unwrap() as usize;
        let v = nums.next().unwrap() as usize;
        let w = nums.next().unwrap();
        adj[u].push((v, w));
        adj[v].push((u, w));
    }
    let mut dist = vec![i64::MAX; n + 1];
    let mut prev = vec![0usize; n + 1];
    let mut heap = BinaryHeap::new();
    dist[1] = 0;
    heap.push(Reverse((0i64, 1usize)));
    while let Some(Reverse((d, u))) = heap.pop() {
        if d > dist[u] {
            continue;
        }
        for &(v, w) in &adj[u] {
            if d + w < dist[v] {
                dist[v] = d + w;
                prev[v] = u;
                heap.push(Reverse((d + w, v)));
            }
        }
    }
    if dist[n] == i64::MAX {
        println!("-1");
        return;
    }
    let mut path = vec![n];
    while *path.last().unwrap() != 1 {
        path.push(prev[*path.last().unwrap()]);
    }
    path.reverse();
    let nodes: Vec<String> = path.iter().map(|v| v.to_string()).collect();
    println!("{}", dist[n]);
    println!("{}", nodes.join(" "));
}
""",
    },
    "builtin/equal-split": {
        "cpp": r"""#include <bitset>
#include <cstddef>
#include <iostream>
#include <string>
#include <vector>

constexpr std::size_t kMaxHalf = 200 * 1000 / 2;  // n <= 200 numbers of at most 1000

int main() {
    int n;
    std::cin >> n;
    std::vector<int> a(n);
    long long total = 0;
    for (int& x : a) {
        std::cin >> x;
        total += x;
    }
    if (total % 2 != 0) {
        std::cout << "NO\n";
        return 0;
    }
    const std::size_t half = total / 2;
    // reach[i]: the sums reachable with a subset of the first i numbers.
    std::vector<std::bitset<kMaxHalf + 1>> reach(n + 1);
    reach[0][0] = true;
    for (int i = 0; i < n; ++i) reach[i + 1] = reach[i] | (reach[i] << a[i]);
    if (!reach[n][half]) {
        std::cout << "NO\n";
        return 0;
    }
    std::vector<int> picked;
    std::size_t t = half;
    for (int i = n; i >= 1; --i) {
        if (!reach[i - 1][t]) {
            picked.push_back(i);
            t -= a[i - 1];
        }
    }
    std::string out = "YES\n";
    for (std::size_t k = picked.size(); k-- > 0;) {
        out += std::to_string(picked[k]);
        if (k > 0) out += ' ';
    }
    std::cout << out << '\n';
}
""",
        "java": r"""import java.io.IOException;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.Collections;
import java.util.List;
import java.util.StringJoiner;
import java.util.StringTokenizer;

public class Main {
    private static boolean has(long[] bits, int s) {
        return (bits[s >>> 6] >>> (s & 63) & 1) != 0;
    }

    public static void main(String[] args) throws IOException {
        StringTokenizer st = new StringTokenizer(new String(System.in.readAllBytes(), StandardCharsets.UTF_8));
        int n = Integer.parseInt(st.nextToken());
        int[] a = new int[n];
        int total = 0;
        for (int i = 0; i < n; i++) {
            a[i] = Integer.parseInt(st.nextToken());
            total += a[i];
        }
        if (total % 2 != 0) {
            System.out.println("NO");
            return;
        }
        int half = total / 2;
        int words = half / 64 + 1;
        // reach[i]: bit s is set when a subset of the first i numbers sums to s (s <= half).
        long[][] reach = new long[n + 1][words];
        reach[0][0] = 1;
        for (int i = 0; i < n; i++) {
            long[] prev = reach[i];
            long[] next = reach[i + 1];
            int q = a[i] / 64;
            int r = a[i] % 64;
            for (int j = 0; j < words; j++) {
                long shifted = 0;
                if (j >= q) {
                    shifted = prev[j - q] << r;
                    if (r > 0 && j > q) {
                        shifted |= prev[j - q - 1] >>> (64 - r);
                    }
                }
                next[j] = prev[j] | shifted;
            }
            int extra = (half + 1) % 64;
            if (extra != 0) {
                next[words - 1] &= (1L << extra) - 1;
            }
        }
        if (!has(reach[n], half)) {
            System.out.println("NO");
            return;
        }
        List<Integer> picked = new ArrayList<>();
        int t = half;
        for (int i = n; i >= 1; i--) {
            if (!has(reach[i - 1], t)) {
                picked.add(i);
                t -= a[i - 1];
            }
        }
        Collections.reverse(picked);
        StringJoiner out = new StringJoiner(" ");
        for (int i : picked) {
            out.add(Integer.toString(i));
        }
        System.out.println("YES");
        System.out.println(out);
    }
}
""",
        "rust": r"""use std::io::{self, Read};

fn has(bits: &[u64], s: usize) -> bool {
    (bits[s / 64] >> (s % 64)) & 1 == 1
}

fn main() {
    let mut input = String::new();
    io::stdin().read_to_string(&mut input).unwrap();
    let mut nums = input.split_whitespace().map(|t| t.parse::<usize>().unwrap());
    let n = nums.next().unwrap();
    let a: Vec<usize> = nums.take(n).collect();
    let total: usize = a.iter().sum();
    if total % 2 == 1 {
        println!("NO");
        return;
    }
    let half = total / 2;
    let words = half / 64 + 1;
    let extra = (half + 1) % 64;
    // reach[i]: bit s is set when a subset of the first i numbers sums to s (s <= half).
    let mut reach: Vec<Vec<u64>> = Vec::with_capacity(a.len() + 1);
    let mut start = vec![0u64; words];
    start[0] = 1;
    reach.push(start);
    for &x in &a {
        let prev = reach.last().unwrap();
        let (q, r) = (x / 64, x % 64);
        let mut next = prev.clone();
        for j in q..words {
            let mut shifted = prev[j - q] << r;
            if r > 0 && j > q {
                shifted |= prev[j - q - 1] >> (64 - r);
            }
            next[j] |= shifted;
        }
        if extra != 0 {
            next[words - 1] &= (1u64 << extra) - 1;
        }
        reach.push(next);
    }
    if !has(&reach[a.len()], half) {
        println!("NO");
        return;
    }
    let mut picked = Vec::new();
    let mut t = half;
    for i in (1..=a.len()).rev() {
        if !has(&reach[i - 1], t) {
            picked.push(i);
            t -= a[i - 1];
        }
    }
    picked.reverse();
    let text: Vec<String> = picked.iter().map(|i| i.to_string()).collect();
    println!("YES");
    println!("{}", text.join(" "));
}
""",
    },
    "builtin/minimum-spanning-tree": {
        "cpp": r"""#include <algorithm>
#include <iostream>
#include <numeric>
#include <tuple>
#include <vector>

int find(std::vector<int>& parent, int x) {
    while (parent[x] != x) {
        parent[x] = parent[parent[x]];
        x = parent[x];
    }
    return x;
}

int main() {
    std::ios::sync_with_stdio(false);
    std::cin.tie(nullptr);
    int n, m;
    std::cin >> n >> m;
    std::vector<std::tuple<long long, int, int>> edges(m);  // (w, u, v)
    for (auto& [w, u, v] : edges) std::cin >> u >> v >> w;
    std::sort(edges.begin(), edges.end());
    std::vector<int> parent(n + 1);
    std::iota(parent.begin(), parent.end(), 0);
    long long total = 0;
    int used = 0;
    for (const auto& [w, u, v] : edges) {
        int ru = find(parent, u), rv = find(parent, v);
        if (ru != rv) {
            parent[ru] = rv;
            total += w;
            ++used;
        }
    }
    if (used == n - 1) {
        std::cout << total << '\n';
    } else {
        std::cout << "IMPOSSIBLE\n";
    }
}
""",
        "java": r"""import java.io.IOException;
import java.nio.charset.StandardCharsets;
import java.util.Arrays;
import java.util.Comparator;
import java.util.StringTokenizer;

public class Main {
    private static int find(int[] parent, int x) {
        while (parent[x] != x) {
            parent[x] = parent[parent[x]];
            x = parent[x];
        }
        return x;
    }

    public static void main(String[] args) throws IOException {
        StringTokenizer st = new StringTokenizer(new String(System.in.readAllBytes(), StandardCharsets.UTF_8));
        int n = Integer.parseInt(st.nextToken());
        int m = Integer.parseInt(st.nextToken());
        long[][] edges = new long[m][];  // (u, v, w)
        for (int i = 0; i < m; i++) {
            long u = Long.parseLong(st.nextToken());
            long v = Long.parseLong(st.nextToken());
            long w = Long.parseLong(st.nextToken());
            edges[i] = new long[] {u, v, w};
        }
        Arrays.sort(edges, Comparator.comparingLong(e -> e[2]));
        int[] parent = new int[n + 1];
        for (int i = 0; i <= n; i++) {
            parent[i] = i;
        }
        long total = 0;
        int used = 0;
        for (long[] e : edges) {
            int ru = find(parent, (int) e[0]);
            int rv = find(parent, (int) e[1]);
            if (ru != rv) {
                parent[ru] = rv;
                total += e[2];
                used++;
            }
        }
        System.out.println(used == n - 1 ? Long.toString(total) : "IMPOSSIBLE");
    }
}
""",
        "rust": r"""use std::io::{self, Read};

fn find(parent: &mut [usize], mut x: usize) -> usize {
    while parent[x] != x {
        parent[x] = parent[parent[x]];
        x = parent[x];
    }
    x
}

fn main() {
    let mut input = String::new();
    io::stdin().read_to_string(&mut input).unwrap();
    let mut nums = input.split_whitespace().map(|t| t.parse::<i64>().unwrap());
    let n = nums.next().unwrap();
    let m = nums.next().unwrap() as usize;
    let mut edges: Vec<(i64, usize, usize)> = (0..m)
        .map(|_| {
            let u = nums.next().unwrap() as usize;
            let v = nums.next().unwrap() as usize;
            (nums.next().unwrap(), u, v)
        })
        .collect();
    edges.sort_unstable();
    let mut parent: Vec<usize> = (0..=n as usize).collect();
    let mut total: i64 = 0;
    let mut used: i64 = 0;
    for (w, u, v) in edges {
        let (ru, rv) = (find(&mut parent, u), find(&mut parent, v));
        if ru != rv {
            parent[ru] = rv;
            total += w;
            used += 1;
        }
    }
    if used == n - 1 {
        println!("{}", total);
    } else {
        println!("IMPOSSIBLE");
    }
}
""",
    },
}

# Function tasks in C++: the driver (registry/drivers/cpp_driver.hpp) calls the function with the
# tests' arguments converted from JSON to its parameter types, and writes its value back as JSON.
FUNCTION_SOLUTIONS: dict[str, dict[str, str]] = {
    "builtin/sum-of-evens": {
        "cpp": r"""#include <vector>

long long sum_of_evens(const std::vector<long long>& nums) {
    long long total = 0;
    for (long long n : nums) {
        if (n % 2 == 0) total += n;
    }
    return total;
}
""",
    },
    "builtin/reverse-words": {
        "cpp": r"""#include <sstream>
#include <string>
#include <vector>

std::string reverse_words(const std::string& s) {
    std::istringstream in(s);
    std::vector<std::string> words;
    for (std::string w; in >> w;) words.push_back(w);
    std::string out;
    for (auto it = words.rbegin(); it != words.rend(); ++it) {
        if (!out.empty()) out += ' ';
        out += *it;
    }
    return out;
}
""",
    },
    "builtin/is-palindrome": {
        "cpp": r"""#include <cctype>
#include <string>

bool is_palindrome(const std::string& s) {
    std::string t;
    for (unsigned char c : s) {
        if (std::isalnum(c)) t += char(std::tolower(c));
    }
    return std::string(t.rbegin(), t.rend()) == t;
}
""",
    },
    "builtin/two-sum-indices": {
        "cpp": r"""#include <unordered_map>
#include <vector>

std::vector<int> two_sum(const std::vector<long long>& nums, long long target) {
    std::unordered_map<long long, int> seen;
    for (int j = 0; j < (int)nums.size(); ++j) {
        auto it = seen.find(target - nums[j]);
        if (it != seen.end()) return {it->second, j};
        seen.emplace(nums[j], j);
    }
    return {};
}
""",
    },
    "builtin/merge-intervals": {
        "cpp": r"""#include <algorithm>
#include <vector>

std::vector<std::vector<long long>> merge(std::vector<std::vector<long long>> intervals) {
    std::sort(intervals.begin(), intervals.end());
    std::vector<std::vector<long long>> out;
    for (const auto& iv : intervals) {
        if (!out.empty() && iv[0] <= out.back()[1]) {
            out.back()[1] = std::max(out.back()[1], iv[1]);
        } else {
            out.push_back({iv[0], iv[1]});
        }
    }
    return out;
}
""",
    },
    "builtin/mean-and-stdev": {
        "cpp": r"""#include <cmath>
#include <vector>

std::vector<double> mean_stdev(const std::vector<double>& xs) {
    double sum = 0;
    for (double x : xs) sum += x;
    double m = sum / xs.size();
    double sq = 0;
    for (double x : xs) sq += (x - m) * (x - m);
    return {m, std::sqrt(sq / xs.size())};
}
""",
    },
    "builtin/topological-order": {
        "cpp": r"""#include <functional>
#include <queue>
#include <vector>

std::vector<int> topo_order(int n, const std::vector<std::pair<int, int>>& edges) {
    std::vector<int> indeg(n, 0);
    std::vector<std::vector<int>> adj(n);
    for (auto [u, v] : edges) {
        adj[u].push_back(v);
        ++indeg[v];
    }
    std::priority_queue<int, std::vector<int>, std::greater<int>> ready;
    for (int i = 0; i < n; ++i) {
        if (indeg[i] == 0) ready.push(i);
    }
    std::vector<int> out;
    while (!ready.empty()) {
        int u = ready.top();
        ready.pop();
        out.push_back(u);
        for (int v : adj[u]) {
            if (--indeg[v] == 0) ready.push(v);
        }
    }
    if ((int)out.size() != n) return {};
    return out;
}
""",
    },
    "builtin/anagram-groups": {
        "cpp": r"""#include <algorithm>
#include <map>
#include <string>
#include <vector>

std::vector<std::vector<std::string>> anagram_groups(const std::vector<std::string>& words) {
    std::map<std::string, std::vector<std::string>> groups;
    for (const auto& w : words) {
        std::string key = w;
        std::sort(key.begin(), key.end());
        groups[key].push_back(w);
    }
    std::vector<std::vector<std::string>> out;
    for (auto& kv : groups) {
        std::sort(kv.second.begin(), kv.second.end());
        out.push_back(kv.second);
    }
    std::sort(out.begin(), out.end());
    return out;
}
""",
    },
    "builtin/valid-ipv4": {
        "cpp": r"""#include <string>

long long ipv4_to_int(const std::string& s) {
    long long value = 0;
    int fields = 0;
    size_t i = 0;
    while (true) {
        size_t j = s.find('.', i);
        std::string p = s.substr(i, j == std::string::npos ? std::string::npos : j - i);
        if (p.empty() || p.size() > 3) return -1;
        for (char c : p) {
            if (c < '0' || c > '9') return -1;
        }
        if (p[0] == '0' && p.size() > 1) return -1;
        int v = std::stoi(p);
        if (v > 255) return -1;
        value = value * 256 + v;
        ++fields;
        if (j == std::string::npos) break;
        i = j + 1;
    }
    return fields == 4 ? value : -1;
}
""",
    },
    "builtin/flatten-nested": {
        # a list of integers and lists, nested at will: no C++ type says that; code_env::Json does
        "cpp": r"""#include <vector>

void collect(const code_env::Json& x, std::vector<long long>& out) {
    for (const auto& item : x.items) {
        if (item.kind == code_env::Json::Array) {
            collect(item, out);
        } else {
            out.push_back(std::stoll(item.text));
        }
    }
}

std::vector<long long> flatten(const code_env::Json& x) {
    std::vector<long long> out;
    collect(x, out);
    return out;
}
""",
    },
    "builtin/edit-distance": {
        "cpp": r"""#include <algorithm>
#include <string>
#include <vector>

int edit_distance(const std::string& a, const std::string& b) {
    std::vector<int> prev(b.size() + 1), cur(b.size() + 1);
    for (size_t j = 0; j <= b.size(); ++j) prev[j] = (int)j;
    for (size_t i = 1; i <= a.size(); ++i) {
        cur[0] = (int)i;
        for (size_t j = 1; j <= b.size(); ++j) {
            cur[j] = std::min({prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + (a[i - 1] != b[j - 1])});
        }
        std::swap(prev, cur);
    }
    return prev[b.size()];
}
""",
    },
    "builtin/int-to-roman": {
        "cpp": r"""#include <string>
#include <utility>

std::string to_roman(int n) {
    static const std::pair<int, const char*> table[] = {
        {1000, "M"}, {900, "CM"}, {500, "D"}, {400, "CD"}, {100, "C"}, {90, "XC"}, {50, "L"},
        {40, "XL"}, {10, "X"}, {9, "IX"}, {5, "V"}, {4, "IV"}, {1, "I"}};
    std::string out;
    for (const auto& [v, s] : table) {
        while (n >= v) {
            out += s;
            n -= v;
        }
    }
    return out;
}
""",
    },
}
