// code-env's driver of a C++ program for a function task (registry/verify.py: the protocol).
//
// The host compiles one source: this header (up to the CANDIDATE line), the candidate's program
// (its lines numbered as its own file, candidate.cpp, which is not on disk: the compiler's
// messages give the program's line numbers and quote no line of this header as the program's),
// then the call (after the CANDIDATE line), which names the entry point. The spec comes on stdin: the nonce, the tests'
// arguments (never their expected values), where the hidden tests start. Each test's arguments
// are converted from JSON to the parameter types of the entry point (the call goes through its
// name: overload resolution picks the function whose parameters JSON converts to: int, long long,
// double, bool, char, std::string, vectors, arrays, sets, maps, pairs, tuples, code_env::Json for
// anything else, by value or by reference), the function is called, and its value goes back
// as JSON on the result channel: the original standard output, which the driver alone writes
// (what the program prints goes to standard error). A value that does not convert is the test's
// TypeError; an exception is the test's error; a program whose function cannot be called with
// JSON data does not compile with the driver (the host tells that from a syntax error).
#line 1 "code-env-driver"
#include <algorithm>
#include <array>
#include <cerrno>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <cxxabi.h>
#include <deque>
#include <exception>
#include <fcntl.h>
#include <iostream>
#include <limits>
#include <list>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <stdexcept>
#include <string>
#include <time.h>
#include <tuple>
#include <type_traits>
#include <typeinfo>
#include <unistd.h>
#include <unordered_map>
#include <unordered_set>
#include <utility>
#include <vector>

namespace code_env {

// A JSON value as the spec carries it: a number keeps its text (converted to the parameter's type).
struct Json {
    enum Kind { Null, Bool, Number, String, Array, Object };
    Kind kind = Null;
    bool boolean = false;
    std::string text;  // a number's digits, a string's bytes (UTF-8)
    std::vector<Json> items;
    std::vector<std::pair<std::string, Json>> fields;
};

namespace detail {

struct ConvertError : std::runtime_error {
    using std::runtime_error::runtime_error;
};

struct Parser {
    const std::string &s;
    size_t p = 0;
    int depth = 0;
    explicit Parser(const std::string &text) : s(text) {}
    [[noreturn]] void fail(const char *why) { throw std::runtime_error(std::string("the spec is not JSON: ") + why); }
    void ws() {
        while (p < s.size() && (s[p] == ' ' || s[p] == '\n' || s[p] == '\r' || s[p] == '\t')) ++p;
    }
    static void utf8(std::string &out, unsigned long c) {
        if (c < 0x80) {
            out += char(c);
        } else if (c < 0x800) {
            out += char(0xC0 | (c >> 6));
            out += char(0x80 | (c & 0x3F));
        } else if (c < 0x10000) {
            out += char(0xE0 | (c >> 12));
            out += char(0x80 | ((c >> 6) & 0x3F));
            out += char(0x80 | (c & 0x3F));
        } else {
            out += char(0xF0 | (c >> 18));
            out += char(0x80 | ((c >> 12) & 0x3F));
            out += char(0x80 | ((c >> 6) & 0x3F));
            out += char(0x80 | (c & 0x3F));
        }
    }
    unsigned long hex4() {
        if (p + 4 > s.size()) fail("a short \\u escape");
        unsigned long c = 0;
        for (int k = 0; k < 4; ++k) {
            char h = s[p++];
            c <<= 4;
            if (h >= '0' && h <= '9') c |= h - '0';
            else if (h >= 'a' && h <= 'f') c |= h - 'a' + 10;
            else if (h >= 'A' && h <= 'F') c |= h - 'A' + 10;
            else fail("a bad \\u escape");
        }
        return c;
    }
    std::string string() {
        std::string out;
        ++p;  // the opening quote
        while (true) {
            if (p >= s.size()) fail("an unfinished string");
            char c = s[p++];
            if (c == '"') return out;
            if (c != '\\') {
                out += c;
                continue;
            }
            if (p >= s.size()) fail("an unfinished escape");
            char e = s[p++];
            switch (e) {
                case '"': out += '"'; break;
                case '\\': out += '\\'; break;
                case '/': out += '/'; break;
                case 'b': out += '\b'; break;
                case 'f': out += '\f'; break;
                case 'n': out += '\n'; break;
                case 'r': out += '\r'; break;
                case 't': out += '\t'; break;
                case 'u': {
                    unsigned long c1 = hex4();
                    if (c1 >= 0xD800 && c1 < 0xDC00 && p + 6 <= s.size() && s[p] == '\\' && s[p + 1] == 'u') {
                        size_t back = p;
                        p += 2;
                        unsigned long c2 = hex4();
                        if (c2 >= 0xDC00 && c2 < 0xE000) {
                            c1 = 0x10000 + ((c1 - 0xD800) << 10) + (c2 - 0xDC00);
                        } else {
                            p = back;
                        }
                    }
                    utf8(out, c1);
                    break;
                }
                default: fail("a bad escape");
            }
        }
    }
    // the items of an array or an object, up to ``close``: ``item`` reads one
    template <class F> void each(char close, F item) {
        ++p;
        ws();
        if (p < s.size() && s[p] == close) {
            ++p;
            return;
        }
        while (true) {
            item();
            ws();
            if (p < s.size() && s[p] == ',') {
                ++p;
                continue;
            }
            if (p < s.size() && s[p] == close) {
                ++p;
                return;
            }
            fail("an unfinished array or object");
        }
    }
    Json value() {
        if (++depth > 200) fail("nested too deeply");
        ws();
        if (p >= s.size()) fail("it ends early");
        Json v;
        char c = s[p];
        if (c == '{') {
            v.kind = Json::Object;
            each('}', [&] {
                ws();
                if (p >= s.size() || s[p] != '"') fail("a key is not a string");
                std::string key = string();
                ws();
                if (p >= s.size() || s[p++] != ':') fail("no colon after a key");
                Json item = value();
                v.fields.emplace_back(std::move(key), std::move(item));
            });
        } else if (c == '[') {
            v.kind = Json::Array;
            each(']', [&] { v.items.push_back(value()); });
        } else if (c == '"') {
            v.kind = Json::String;
            v.text = string();
        } else if (s.compare(p, 4, "true") == 0) {
            v.kind = Json::Bool, v.boolean = true, p += 4;
        } else if (s.compare(p, 5, "false") == 0) {
            v.kind = Json::Bool, p += 5;
        } else if (s.compare(p, 4, "null") == 0) {
            p += 4;
        } else if (s.compare(p, 3, "NaN") == 0 || s.compare(p, 8, "Infinity") == 0 || s.compare(p, 9, "-Infinity") == 0) {
            v.kind = Json::Number;
            size_t n = s[p] == 'N' ? 3 : s[p] == 'I' ? 8 : 9;
            v.text = s.substr(p, n);
            p += n;
        } else {
            size_t b = p;
            while (p < s.size() && (std::isdigit((unsigned char)s[p]) || std::strchr("+-.eE", s[p]))) ++p;
            if (b == p) fail("an unexpected character");
            v.kind = Json::Number;
            v.text = s.substr(b, p - b);
        }
        --depth;
        return v;
    }
};

inline const char *kind_name(Json::Kind k) {
    static const char *names[] = {"null", "a boolean", "a number", "a string", "an array", "an object"};
    return names[k];
}

inline std::string demangle(const char *name) {
    int status = 0;
    char *out = abi::__cxa_demangle(name, nullptr, nullptr, &status);
    std::string r = status == 0 && out ? out : name;
    std::free(out);
    return r;
}

template <class T> std::string type_name() { return demangle(typeid(T).name()); }

[[noreturn]] inline void mismatch(const Json &j, const std::string &want) {
    throw ConvertError("expected " + want + ", got " + kind_name(j.kind) + (j.kind == Json::Number ? " " + j.text : ""));
}

// How a type converts from JSON (``from``) and to it (``to``); a type it does not know has neither.
template <class T, class = void> struct Convert {};

template <class T, class = void> struct to_json_able : std::false_type {};
template <class T>
struct to_json_able<T, std::void_t<decltype(Convert<T>::to(std::declval<std::string &>(), std::declval<const T &>()))>> : std::true_type {};

template <class T> T from_json(const Json &j) { return Convert<T>::from(j); }
template <class T> void to_json(std::string &out, const T &v) {
    static_assert(to_json_able<T>::value,
                  "code-env: the entry point returns a value that is not JSON data (return numbers, bool, char, std::string, "
                  "std::vector, std::array, std::set, std::map, std::pair, std::tuple, std::optional or code_env::Json)");
    Convert<T>::to(out, v);
}

inline void quote(std::string &out, const std::string &s) {
    static const char *hex = "0123456789abcdef";
    out += '"';
    for (unsigned char c : s) {
        switch (c) {
            case '"': out += "\\\""; break;
            case '\\': out += "\\\\"; break;
            case '\n': out += "\\n"; break;
            case '\r': out += "\\r"; break;
            case '\t': out += "\\t"; break;
            default:
                if (c < 0x20 || c == 0x7f) {
                    out += "\\u00";
                    out += hex[c >> 4];
                    out += hex[c & 15];
                } else {
                    out += char(c);
                }
        }
    }
    out += '"';
}

template <> struct Convert<Json> {
    static Json from(const Json &j) { return j; }
    static void to(std::string &out, const Json &j) {
        switch (j.kind) {
            case Json::Null: out += "null"; break;
            case Json::Bool: out += j.boolean ? "true" : "false"; break;
            case Json::Number: out += j.text; break;
            case Json::String: quote(out, j.text); break;
            case Json::Array:
                out += '[';
                for (size_t k = 0; k < j.items.size(); ++k) {
                    if (k) out += ", ";
                    to(out, j.items[k]);
                }
                out += ']';
                break;
            case Json::Object:
                out += '{';
                for (size_t k = 0; k < j.fields.size(); ++k) {
                    if (k) out += ", ";
                    quote(out, j.fields[k].first);
                    out += ": ";
                    to(out, j.fields[k].second);
                }
                out += '}';
        }
    }
};

template <> struct Convert<bool> {
    static bool from(const Json &j) {
        if (j.kind != Json::Bool) mismatch(j, "a boolean");
        return j.boolean;
    }
    static void to(std::string &out, bool v) { out += v ? "true" : "false"; }
};

template <class T> bool integer_text(const std::string &text, T &out) {
    if (text.empty() || text.find_first_of(".eE") != std::string::npos) return false;
    errno = 0;
    char *end = nullptr;
    if (std::is_signed<T>::value) {
        long long v = std::strtoll(text.c_str(), &end, 10);
        if (errno || *end || v < (long long)std::numeric_limits<T>::min() || v > (long long)std::numeric_limits<T>::max())
            return false;
        out = T(v);
    } else {
        if (text[0] == '-') return false;
        unsigned long long v = std::strtoull(text.c_str(), &end, 10);
        if (errno || *end || v > (unsigned long long)std::numeric_limits<T>::max()) return false;
        out = T(v);
    }
    return true;
}

template <class T>
struct Convert<T, std::enable_if_t<std::is_integral<T>::value && !std::is_same<T, bool>::value && !std::is_same<T, char>::value>> {
    static T from(const Json &j) {
        T v{};
        if (j.kind != Json::Number) mismatch(j, "an integer");
        if (!integer_text(j.text, v)) mismatch(j, "an integer that fits in " + type_name<T>());
        return v;
    }
    static void to(std::string &out, T v) { out += std::to_string(v); }
};

template <class T> struct Convert<T, std::enable_if_t<std::is_floating_point<T>::value>> {
    static T from(const Json &j) {
        if (j.kind != Json::Number) mismatch(j, "a number");
        if (j.text == "NaN") return std::numeric_limits<T>::quiet_NaN();
        if (j.text == "Infinity") return std::numeric_limits<T>::infinity();
        if (j.text == "-Infinity") return -std::numeric_limits<T>::infinity();
        return T(std::strtold(j.text.c_str(), nullptr));
    }
    static void to(std::string &out, T v) {
        if (std::isnan(v)) { out += "NaN"; return; }
        if (std::isinf(v)) { out += v > 0 ? "Infinity" : "-Infinity"; return; }
        char buf[64];
        std::snprintf(buf, sizeof buf, "%.17g", double(v));
        out += buf;
        if (!std::strpbrk(buf, ".eE")) out += ".0";  // a float stays a float (as Python's json writes it)
    }
};

template <> struct Convert<char> {
    static char from(const Json &j) {
        if (j.kind != Json::String || j.text.size() != 1) mismatch(j, "a string of one character");
        return j.text[0];
    }
    static void to(std::string &out, char c) { quote(out, std::string(1, c)); }
};

template <> struct Convert<std::string> {
    static std::string from(const Json &j) {
        if (j.kind != Json::String) mismatch(j, "a string");
        return j.text;
    }
    static void to(std::string &out, const std::string &v) { quote(out, v); }
};

template <class T> void array_to(std::string &out, const T &items) {
    out += '[';
    bool first = true;
    for (const auto &x : items) {
        if (!first) out += ", ";
        first = false;
        to_json(out, x);
    }
    out += ']';
}

template <class T> const Json &array_of(const Json &j) {
    if (j.kind != Json::Array) mismatch(j, "an array (for " + type_name<T>() + ")");
    return j;
}

// A container of items, from an array (each item in its turn: order kept, or the set's own) and to one.
template <class S> struct Items {
    static S from(const Json &j) {
        S v;
        for (const auto &x : array_of<S>(j).items) v.insert(v.end(), from_json<typename S::value_type>(x));
        return v;
    }
    static void to(std::string &out, const S &v) { array_to(out, v); }
};
template <class T, class A> struct Convert<std::vector<T, A>> : Items<std::vector<T, A>> {};
template <class T, class A> struct Convert<std::deque<T, A>> : Items<std::deque<T, A>> {};
template <class T, class A> struct Convert<std::list<T, A>> : Items<std::list<T, A>> {};
template <class T, class C, class A> struct Convert<std::set<T, C, A>> : Items<std::set<T, C, A>> {};
template <class T, class C, class A> struct Convert<std::multiset<T, C, A>> : Items<std::multiset<T, C, A>> {};
template <class T, size_t N> struct Convert<std::array<T, N>> {
    static std::array<T, N> from(const Json &j) {
        const Json &a = array_of<std::array<T, N>>(j);
        if (a.items.size() != N) throw ConvertError("expected an array of " + std::to_string(N) + " items, got " + std::to_string(a.items.size()));
        std::array<T, N> v{};
        for (size_t k = 0; k < N; ++k) v[k] = from_json<T>(a.items[k]);
        return v;
    }
    static void to(std::string &out, const std::array<T, N> &v) { array_to(out, v); }
};
template <class T, class H, class E, class A> struct Convert<std::unordered_set<T, H, E, A>> : Items<std::unordered_set<T, H, E, A>> {
    static void to(std::string &out, const std::unordered_set<T, H, E, A> &v) {  // sorted, as the Python driver writes a set
        std::vector<T> items(v.begin(), v.end());
        std::sort(items.begin(), items.end());
        array_to(out, items);
    }
};

template <class K> K key_from(const std::string &key) {
    if constexpr (std::is_same<K, std::string>::value) {
        return key;
    } else if constexpr (std::is_integral<K>::value && !std::is_same<K, bool>::value) {
        K v{};
        if (!integer_text(key, v)) throw ConvertError("expected an object whose keys are integers, got the key \"" + key + "\"");
        return v;
    } else {
        static_assert(sizeof(K) == 0, "code-env: a map's keys are strings or integers");
    }
}
template <class K> void key_to(std::string &out, const K &key) {
    if constexpr (std::is_same<K, std::string>::value) {
        quote(out, key);
    } else if constexpr (std::is_integral<K>::value && !std::is_same<K, bool>::value) {
        quote(out, std::to_string(key));  // as Python's json writes an int key
    } else {
        static_assert(sizeof(K) == 0, "code-env: a map's keys are strings or integers");
    }
}
template <class M> M map_from(const Json &j) {
    if (j.kind != Json::Object) mismatch(j, "an object (for " + type_name<M>() + ")");
    M m;
    for (const auto &f : j.fields) m[key_from<typename M::key_type>(f.first)] = from_json<typename M::mapped_type>(f.second);
    return m;
}
template <class M> void map_to(std::string &out, const M &m) {
    out += '{';
    bool first = true;
    for (const auto &kv : m) {
        if (!first) out += ", ";
        first = false;
        key_to(out, kv.first);
        out += ": ";
        to_json(out, kv.second);
    }
    out += '}';
}
template <class K, class V, class C, class A> struct Convert<std::map<K, V, C, A>> {
    static std::map<K, V, C, A> from(const Json &j) { return map_from<std::map<K, V, C, A>>(j); }
    static void to(std::string &out, const std::map<K, V, C, A> &m) { map_to(out, m); }
};
template <class K, class V, class H, class E, class A> struct Convert<std::unordered_map<K, V, H, E, A>> {
    static std::unordered_map<K, V, H, E, A> from(const Json &j) { return map_from<std::unordered_map<K, V, H, E, A>>(j); }
    static void to(std::string &out, const std::unordered_map<K, V, H, E, A> &m) { map_to(out, m); }
};

template <class... T> struct Convert<std::tuple<T...>> {
    template <size_t... I> static std::tuple<T...> build(const Json &a, std::index_sequence<I...>) {
        return std::tuple<T...>(from_json<T>(a.items[I])...);
    }
    static std::tuple<T...> from(const Json &j) {
        const Json &a = array_of<std::tuple<T...>>(j);
        if (a.items.size() != sizeof...(T))
            throw ConvertError("expected an array of " + std::to_string(sizeof...(T)) + " items, got " + std::to_string(a.items.size()));
        return build(a, std::index_sequence_for<T...>{});
    }
    template <size_t... I> static void write(std::string &out, const std::tuple<T...> &v, std::index_sequence<I...>) {
        out += '[';
        ((out += (I ? ", " : ""), to_json(out, std::get<I>(v))), ...);
        out += ']';
    }
    static void to(std::string &out, const std::tuple<T...> &v) { write(out, v, std::index_sequence_for<T...>{}); }
};
template <class A, class B> struct Convert<std::pair<A, B>> {
    static std::pair<A, B> from(const Json &j) {
        auto t = from_json<std::tuple<A, B>>(j);
        return {std::get<0>(t), std::get<1>(t)};
    }
    static void to(std::string &out, const std::pair<A, B> &v) { to_json(out, std::tuple<A, B>(v.first, v.second)); }
};
template <class T> struct Convert<std::optional<T>> {
    static std::optional<T> from(const Json &j) {
        if (j.kind == Json::Null) return std::nullopt;
        return from_json<T>(j);
    }
    static void to(std::string &out, const std::optional<T> &v) {
        if (v) to_json(out, *v);
        else out += "null";
    }
};
template <> struct Convert<const char *> {
    static void to(std::string &out, const char *v) {
        if (v) quote(out, v);
        else out += "null";
    }
};
template <> struct Convert<std::nullptr_t> {
    static std::nullptr_t from(const Json &j) {
        if (j.kind != Json::Null) mismatch(j, "null");
        return nullptr;
    }
    static void to(std::string &out, std::nullptr_t) { out += "null"; }
};

// The run's ends: the spec (read before the program's own static objects are made) and the
// channel (the original standard output; the program's goes to standard error).
struct Channel {
    int fd = -1;
    std::string spec;
    Channel() {
        fd = fcntl(1, F_DUPFD_CLOEXEC, 3);
        dup2(2, 1);
        char buf[1 << 16];
        for (ssize_t n; (n = read(0, buf, sizeof buf)) != 0;) {
            if (n < 0) {
                if (errno == EINTR) continue;
                break;
            }
            spec.append(buf, size_t(n));
        }
    }
};
inline Channel &channel() {
    static Channel ch;
    return ch;
}
static Channel &code_env_channel_ = channel();  // made before anything of the program's

inline void write_all(int fd, const std::string &text, bool channel_write) {
    for (size_t off = 0; off < text.size();) {
        ssize_t n = write(fd, text.data() + off, text.size() - off);
        if (n < 0 && (errno == EINTR || errno == EAGAIN)) {
            if (errno == EAGAIN) usleep(1000);
            continue;
        }
        if (n <= 0) {
            if (channel_write) _exit(CHANNEL_LOST);
            return;
        }
        off += size_t(n);
    }
}

inline void flush_program() {
    std::cout.flush();
    std::cerr.flush();
    std::fflush(nullptr);
}

inline std::string cut(const std::string &s, size_t n) { return s.size() > n ? s.substr(0, n) : s; }

inline double now() {
    timespec t{};
    clock_gettime(CLOCK_MONOTONIC, &t);
    return double(t.tv_sec) + double(t.tv_nsec) / 1e9;
}

// One argument of a call: it converts to whatever JSON type the parameter is (by value, by
// reference, const or not), each conversion kept alive for the call. The call goes through the
// entry point's name, so overload resolution picks the function: a program's ``strlen(std::string)``
// beside the C library's ``strlen(const char *)`` (which no JSON value converts to) is the one called.
template <class T, class = void> struct from_json_able : std::false_type {};
template <class T> struct from_json_able<T, std::void_t<decltype(Convert<T>::from(std::declval<const Json &>()))>> : std::true_type {};

struct Arg {
    const Json *json;
    mutable std::vector<std::shared_ptr<void>> keep;
    template <class T, class = std::enable_if_t<from_json_able<std::remove_cv_t<T>>::value>> operator T &() const {
        auto value = std::make_shared<std::remove_cv_t<T>>(from_json<std::remove_cv_t<T>>(*json));
        keep.push_back(value);
        return *value;
    }
};

constexpr size_t MAX_ARITY = 8;
template <size_t> using ArgRef = Arg &;
template <class F, size_t... I> constexpr bool callable_with(std::index_sequence<I...>) {
    return std::is_invocable<F &, ArgRef<I>...>::value;
}
template <class F, size_t... N> constexpr std::array<bool, sizeof...(N)> arities(std::index_sequence<N...>) {
    return {callable_with<F>(std::make_index_sequence<N>{})...};
}

template <size_t N> constexpr bool any(const std::array<bool, N> &a) {
    for (bool b : a)
        if (b) return true;
    return false;
}

template <class F, size_t... I> std::string call(F &f, std::vector<Arg> &args, double &t, double &seconds, std::index_sequence<I...>) {
    using R = std::invoke_result_t<F &, ArgRef<I>...>;
    std::string out;
    t = now();
    if constexpr (std::is_void<R>::value) {
        f(args[I]...);
        seconds = now() - t;
        out = "null";
    } else {
        R r = f(args[I]...);
        seconds = now() - t;
        to_json(out, static_cast<const std::decay_t<R> &>(r));
    }
    return out;
}

template <class F, size_t N = 0> std::string call_n(F &f, std::vector<Arg> &args, double &t, double &seconds) {
    if constexpr (N > MAX_ARITY) {
        throw ConvertError("unreachable");
    } else if (args.size() != N) {
        return call_n<F, N + 1>(f, args, t, seconds);
    } else if constexpr (callable_with<F>(std::make_index_sequence<N>{})) {
        return call(f, args, t, seconds, std::make_index_sequence<N>{});
    } else {
        throw ConvertError("unreachable");
    }
}

inline const Json *field(const Json &obj, const char *name) {
    for (const auto &f : obj.fields)
        if (f.first == name) return &f.second;
    return nullptr;
}

struct Line {
    std::string tag, text;
    explicit Line(const std::string &nonce) : tag(nonce + " ") {}
    Line &begin(const char *k) {
        text = tag + "{\"k\": ";
        quote(text, k);
        return *this;
    }
    Line &str(const char *key, const std::string &v) {
        text += ", ";
        quote(text, key);
        text += ": ";
        quote(text, v);
        return *this;
    }
    Line &raw(const char *key, const std::string &v) {
        text += ", ";
        quote(text, key);
        text += ": " + v;
        return *this;
    }
    void emit(int fd) {
        text += "}\n";
        write_all(fd, text, true);
    }
};

template <class F> int drive(F f) {
    Channel &ch = channel();
    flush_program();
    Json spec;
    try {
        spec = Parser(ch.spec).value();
    } catch (const std::exception &e) {
        std::fprintf(stderr, "code-env driver: %s\n", e.what());
        return 2;
    }
    const Json *nonce = field(spec, "nonce"), *cases = field(spec, "cases"), *start_ = field(spec, "start"),
               *hidden_ = field(spec, "hidden_from");
    if (!nonce || !cases || !start_ || !hidden_) {
        std::fprintf(stderr, "code-env driver: the spec lacks a field\n");
        return 2;
    }
    Line line(nonce->text);
    long start = std::atol(start_->text.c_str());
    long hidden_from = hidden_->kind == Json::Number ? std::atol(hidden_->text.c_str()) : -1;
    auto hidden_start = [&]() {
        flush_program();
        write_all(2, HIDDEN_MARK, false);
    };
    if (hidden_from >= 0 && hidden_from <= start) hidden_start();
    line.begin("loaded").emit(ch.fd);
    constexpr auto takes = arities<F>(std::make_index_sequence<MAX_ARITY + 1>{});
    static_assert(any(takes),
                  "code-env: no function of the entry point's name can be called with JSON data: none is defined at the top "
                  "level, or its parameters are not numbers, bool, char, std::string, std::vector, std::array, std::set, "
                  "std::map, std::pair, std::tuple or code_env::Json (by value or by reference), or it takes more than 8");
    std::string counts;
    for (size_t n = 0; n <= MAX_ARITY; ++n) {
        if (takes[n]) counts += (counts.empty() ? "" : " or ") + std::to_string(n);
    }
    long k = 0;
    for (const Json &c : cases->items) {
        long i = start + k++;
        if (i == hidden_from) hidden_start();
        const Json *args = field(c, "args"), *kwargs = field(c, "kwargs");
        double t = 0, seconds = 0;
        std::string error, message, value;
        if (!args || args->kind != Json::Array) {
            error = "TypeError", message = "the test has no arguments";
        } else if (kwargs && !kwargs->fields.empty()) {
            error = "TypeError", message = "keyword arguments: a C++ function takes none";
        } else if (args->items.size() > MAX_ARITY || !takes[args->items.size()]) {
            error = "TypeError", message = "the function takes " + counts + " argument(s) of JSON data, the test gives " +
                                           std::to_string(args->items.size());
        } else {
            try {
                std::vector<Arg> values;
                for (const Json &a : args->items) values.push_back(Arg{&a, {}});
                value = call_n(f, values, t, seconds);
            } catch (const ConvertError &e) {
                error = "TypeError", message = e.what();
            } catch (const std::exception &e) {
                error = demangle(typeid(e).name()), message = e.what();
            } catch (...) {
                error = "exception", message = "a value that is not a std::exception was thrown";
            }
            if (!error.empty() && t > 0) seconds = now() - t;
        }
        char s[32];
        std::snprintf(s, sizeof s, "%.9f", seconds);
        if (!error.empty()) {
            line.begin("error").raw("i", std::to_string(i)).str("error", cut(error, 100)).str("message", cut(message, 500))
                .raw("traceback", "null").raw("s", s).emit(ch.fd);
        } else if (value.size() > MAX_VALUE_CHARS) {
            line.begin("error").raw("i", std::to_string(i)).str("error", "RangeError")
                .str("message", "the return value is " + std::to_string(value.size()) +
                                    " characters of JSON, over the limit of " + std::to_string(MAX_VALUE_CHARS))
                .raw("traceback", "null").raw("s", s).emit(ch.fd);
        } else {
            line.begin("result").raw("i", std::to_string(i)).str("value", value).raw("s", s).emit(ch.fd);
        }
    }
    line.begin("end").raw("n", std::to_string(k)).emit(ch.fd);
    flush_program();
    _exit(0);
}

}  // namespace detail
}  // namespace code_env

#define main code_env_candidate_main
#line 1 "candidate.cpp"
//@@CANDIDATE@@
#line 1 "code-env-driver-call"
#undef main
#undef int
int main() {
    return ::code_env::detail::drive([](auto &&...code_env_args) -> decltype(ENTRY_POINT(code_env_args...)) {
        return ENTRY_POINT(code_env_args...);
    });
}
