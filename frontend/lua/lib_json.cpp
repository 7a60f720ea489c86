// braid.json (lib_json.h). Like the braid module's functions, each
// lua_CFunction here checks its arguments first with no C++ object alive,
// then runs a noexcept helper in a host section (raw table access, push*,
// to*; the allocator does not enforce the cap there, so the helper checks
// the cap itself with LuaState::MayHold), and raises only once the helper's
// frame is gone.
#include "lua/lib_json.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <limits>
#include <new>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <vector>

extern "C" {
#include <lauxlib.h>
#include <lua.h>
}

#include "lua/lua_state.h"

namespace braid::lua {
namespace {

const char* const kNullMeta = "braid.json.null";
constexpr int kRaise = -1;  // the helper pushed an error message

// Runs `impl` in a host section; raises if it returned kRaise. A
// std::bad_alloc from the host's own copies becomes a Lua memory error.
template <typename F>
int HostCall(lua_State* L, F&& impl) {
  LuaState* s = LuaState::From(L);
  s->EnterHost();
  int r;
  try {
    r = impl();
  } catch (...) {  // std::bad_alloc from the host's own copies
    r = -2;
  }
  s->LeaveHost();
  if (r == kRaise) return lua_error(L);
  if (r == -2) return luaL_error(L, "out of memory in braid.json");
  return r;
}

// Pushes "FILE:LINE: braid.json.WHAT: msg"; returns kRaise.
int PushError(lua_State* L, const char* what, const std::string& msg) {
  luaL_where(L, 1);
  lua_pushfstring(L, "braid.json.%s: ", what);
  lua_pushlstring(L, msg.data(), msg.size());
  lua_concat(L, 3);
  return kRaise;
}

// Whether the state may hold what it holds now plus `extra` bytes (the cap
// and the memory account); records the memory limit as hit when not.
bool WithinCap(LuaState* s, size_t extra) {
  return s->MayHold(s->memory_used() + s->host_bytes() + extra);
}

// ---- decode --------------------------------------------------------------------

// nlohmann's SAX events -> Lua values on the stack. Each container open is a
// table on the stack (an object's pending key above it); a finished value
// goes into the container below it, or stays as the result.
class LuaBuilder {
 public:
  LuaBuilder(lua_State* L, LuaState* s, int null_index) : L_(L), s_(s), null_(null_index) {}

  bool null() {
    lua_pushvalue(L_, null_);
    return Add();
  }
  bool boolean(bool v) {
    lua_pushboolean(L_, v);
    return Add();
  }
  bool number_integer(int64_t v) {
    lua_pushinteger(L_, static_cast<lua_Integer>(v));
    return Add();
  }
  bool number_unsigned(uint64_t v) {
    // Above the largest Lua integer: a float, as Lua reads such a literal.
    if (v > static_cast<uint64_t>(std::numeric_limits<lua_Integer>::max()))
      lua_pushnumber(L_, static_cast<lua_Number>(v));
    else
      lua_pushinteger(L_, static_cast<lua_Integer>(v));
    return Add();
  }
  bool number_float(double v, const std::string&) {
    lua_pushnumber(L_, static_cast<lua_Number>(v));
    return Add();
  }
  bool string(std::string& v) {
    lua_pushlstring(L_, v.data(), v.size());
    return Add();
  }
  bool binary(std::vector<uint8_t>&) { return false; }  // not in JSON text
  bool start_object(size_t) { return Open(true); }
  bool key(std::string& k) {
    lua_pushlstring(L_, k.data(), k.size());
    return Check();
  }
  bool end_object() { return Close(); }
  bool start_array(size_t) { return Open(false); }
  bool end_array() { return Close(); }
  bool parse_error(size_t, const std::string&, const nlohmann::detail::exception& e) {
    // "[json.exception.parse_error.101] parse error at line 1, column 5: ...",
    // or "[json.exception.out_of_range.406] number overflow parsing '1e999'".
    std::string w = e.what();
    if (w.compare(0, 1, "[") == 0 && w.find("] ") != std::string::npos)
      w.erase(0, w.find("] ") + 2);
    constexpr std::string_view kParse = "parse error";
    error_ = "invalid JSON" +
             (w.compare(0, kParse.size(), kParse) == 0 ? w.substr(kParse.size()) : ": " + w);
    if (error_.size() > 300) {  // "last read" may quote a long token
      size_t cut = 300;
      while (cut > 0 && (static_cast<unsigned char>(error_[cut]) & 0xC0) == 0x80) --cut;
      error_.resize(cut);
      error_ += "...";
    }
    return false;
  }

  const std::string& error() const { return error_; }

 private:
  struct Frame {
    bool object;
    lua_Integer n;  // array items so far
  };

  bool Open(bool object) {
    if (frames_.size() >= static_cast<size_t>(kMaxJsonDepth)) {
      error_ = "nested more than " + std::to_string(kMaxJsonDepth) + " levels deep";
      return false;
    }
    if (!lua_checkstack(L_, 4)) {
      error_ = "nested too deep";
      return false;
    }
    lua_createtable(L_, 0, 0);
    frames_.push_back({object, 0});
    return Check();
  }
  bool Close() {
    frames_.pop_back();
    return Add();
  }
  // The value on top goes into the container below it: t[key] = v for an
  // object (stack: t, key, v), t[n + 1] = v for an array (t, v).
  bool Add() {
    if (!frames_.empty()) {
      Frame& f = frames_.back();
      if (f.object)
        lua_rawset(L_, -3);
      else
        lua_rawseti(L_, -2, ++f.n);
    }
    return Check();
  }
  // What the values built so far take, against the cap.
  bool Check() {
    if (WithinCap(s_, 0)) return true;
    error_ = s_->LimitMessage();
    return false;
  }

  lua_State* L_;
  LuaState* s_;
  int null_;
  std::vector<Frame> frames_;
  std::string error_;
};

int Decode(lua_State* L) {
  luaL_checklstring(L, 1, nullptr);
  lua_settop(L, 1);
  return HostCall(L, [L]() {
    size_t len = 0;
    const char* text = lua_tolstring(L, 1, &len);
    LuaBuilder b(L, LuaState::From(L), lua_upvalueindex(1));
    if (!nlohmann::json::sax_parse(text, text + len, &b)) {
      lua_settop(L, 1);  // what was built so far is garbage
      return PushError(L, "decode", b.error().empty() ? "invalid JSON" : b.error());
    }
    return 1;
  });
}

// ---- encode --------------------------------------------------------------------

// Appends `s` as a JSON string; false when it is not valid UTF-8 (the byte
// offset of the first bad byte in *bad).
bool AppendString(std::string* out, const char* s, size_t n, size_t* bad) {
  out->push_back('"');
  for (size_t i = 0; i < n;) {
    const unsigned char c = static_cast<unsigned char>(s[i]);
    if (c < 0x80) {
      switch (c) {
        case '"':
          *out += "\\\"";
          break;
        case '\\':
          *out += "\\\\";
          break;
        case '\n':
          *out += "\\n";
          break;
        case '\r':
          *out += "\\r";
          break;
        case '\t':
          *out += "\\t";
          break;
        case '\b':
          *out += "\\b";
          break;
        case '\f':
          *out += "\\f";
          break;
        default:
          if (c < 0x20) {
            char esc[8];
            std::snprintf(esc, sizeof esc, "\\u%04x", c);
            *out += esc;
          } else {
            out->push_back(static_cast<char>(c));
          }
      }
      ++i;
      continue;
    }
    // A UTF-8 sequence: its length from the lead byte, continuation bytes,
    // no overlong forms, no surrogates, nothing above U+10FFFF.
    const size_t len = c >= 0xF0 ? 4 : c >= 0xE0 ? 3 : c >= 0xC2 ? 2 : 0;
    bool ok = len != 0 && c <= 0xF4 && i + len <= n;
    for (size_t k = 1; ok && k < len; ++k)
      ok = (static_cast<unsigned char>(s[i + k]) & 0xC0) == 0x80;
    if (ok && len >= 3) {
      const unsigned char c1 = static_cast<unsigned char>(s[i + 1]);
      ok = !(c == 0xE0 && c1 < 0xA0) && !(c == 0xED && c1 >= 0xA0) && !(c == 0xF0 && c1 < 0x90) &&
           !(c == 0xF4 && c1 >= 0x90);
    }
    if (!ok) {
      *bad = i;
      return false;
    }
    out->append(s + i, len);
    i += len;
  }
  out->push_back('"');
  return true;
}

class Encoder {
 public:
  Encoder(lua_State* L, LuaState* s, int null_index) : L_(L), s_(s), null_(null_index) {}

  // Appends the value at `idx` (absolute) to out_, `path` naming it in errors.
  bool Value(int idx, int depth, const std::string& path) {
    switch (lua_type(L_, idx)) {
      case LUA_TNIL:
        out_ += "null";
        break;
      case LUA_TBOOLEAN:
        out_ += lua_toboolean(L_, idx) ? "true" : "false";
        break;
      case LUA_TNUMBER:
        if (!Number(idx, path)) return false;
        break;
      case LUA_TSTRING: {
        size_t n = 0, bad = 0;
        const char* s = lua_tolstring(L_, idx, &n);
        if (!AppendString(&out_, s, n, &bad))
          return Fail(path + " is not valid UTF-8 text (at byte " + std::to_string(bad) + ")");
        break;
      }
      case LUA_TTABLE:
        if (!Table(idx, depth, path)) return false;
        break;
      default:
        if (lua_rawequal(L_, idx, null_)) {
          out_ += "null";
          break;
        }
        if (luaL_testudata(L_, idx, "braid.var"))
          return Fail(path + " is a braid variable: encode its value, v:get()");
        return Fail(path + " is a " + luaL_typename(L_, idx) + ", which has no JSON form");
    }
    // What the text takes, against the cap.
    if (!WithinCap(s_, out_.size())) return Fail(s_->LimitMessage());
    return true;
  }

  const std::string& out() const { return out_; }
  const std::string& error() const { return error_; }

 private:
  bool Fail(std::string why) {
    error_ = std::move(why);
    return false;
  }

  bool Number(int idx, const std::string& path) {
    if (lua_isinteger(L_, idx)) {
      out_ += std::to_string(lua_tointeger(L_, idx));
      return true;
    }
    const double v = static_cast<double>(lua_tonumber(L_, idx));
    if (!std::isfinite(v))
      return Fail(path + " is " + (std::isnan(v) ? "NaN" : "infinite") +
                  ", which JSON cannot write");
    // Negative zero: "-0" would read back as the integer 0.
    if (v == 0 && std::signbit(v)) {
      out_ += "-0.0";
      return true;
    }
    // The shortest of 15, 16 or 17 digits that reads back as the same double.
    char buf[32];
    for (int digits = 15; digits <= 17; ++digits) {
      std::snprintf(buf, sizeof buf, "%.*g", digits, v);
      if (std::strtod(buf, nullptr) == v) break;
    }
    out_ += buf;
    return true;
  }

  // A table whose keys are exactly 1..n is an array (the empty table too);
  // else an object with string or integer keys, written in sorted order so
  // that equal tables give equal text (a prompt built from it stays the
  // same on resume).
  bool Table(int idx, int depth, const std::string& path) {
    if (depth >= kMaxJsonDepth)
      return Fail(path + " is nested more than " + std::to_string(kMaxJsonDepth) +
                  " levels deep (a table that contains itself?)");
    if (!lua_checkstack(L_, 4)) return Fail(path + " is nested too deep");
    const lua_Unsigned n = lua_rawlen(L_, idx);
    std::vector<std::pair<std::string, int>> keys;  // text; 1 integer, 0 string
    lua_pushnil(L_);
    while (lua_next(L_, idx)) {
      lua_pop(L_, 1);
      if (lua_type(L_, -1) == LUA_TSTRING) {
        size_t len = 0;
        const char* k = lua_tolstring(L_, -1, &len);
        keys.emplace_back(std::string(k, len), 0);
      } else if (lua_isinteger(L_, -1)) {
        keys.emplace_back(std::to_string(lua_tointeger(L_, -1)), 1);
      } else {
        const char* type = luaL_typename(L_, -1);
        lua_pop(L_, 1);
        return Fail(path + " has a " + type + " key, which has no JSON form");
      }
    }
    const int top = lua_gettop(L_);
    if (keys.size() == n) {  // a sequence 1..n
      out_ += '[';
      for (lua_Unsigned i = 1; i <= n; ++i) {
        if (i > 1) out_ += ',';
        lua_rawgeti(L_, idx, static_cast<lua_Integer>(i));
        const bool ok = Value(top + 1, depth + 1, path + "[" + std::to_string(i) + "]");
        lua_settop(L_, top);
        if (!ok) return false;
      }
      out_ += ']';
      return true;
    }
    std::sort(keys.begin(), keys.end());
    out_ += '{';
    for (size_t i = 0; i < keys.size(); ++i) {
      const auto& [text, integer] = keys[i];
      if (i > 0 && text == keys[i - 1].first)
        return Fail(path + " has the key \"" + text + "\" both as a string and as a number");
      if (i > 0) out_ += ',';
      size_t bad = 0;
      if (!AppendString(&out_, text.data(), text.size(), &bad))
        return Fail(path + " has a key that is not valid UTF-8 text");
      out_ += ':';
      if (integer)
        lua_pushinteger(L_, std::stoll(text));
      else
        lua_pushlstring(L_, text.data(), text.size());
      lua_rawget(L_, idx);
      const bool ok = Value(top + 1, depth + 1, path + "." + text);
      lua_settop(L_, top);
      if (!ok) return false;
    }
    out_ += '}';
    return true;
  }

  lua_State* L_;
  LuaState* s_;
  int null_;
  std::string out_;
  std::string error_;
};

int Encode(lua_State* L) {
  luaL_checkany(L, 1);
  lua_settop(L, 1);
  lua_pushvalue(L, lua_upvalueindex(1));  // 2: braid.json.null
  return HostCall(L, [L]() {
    Encoder e(L, LuaState::From(L), 2);
    if (!e.Value(1, 0, "value")) return PushError(L, "encode", e.error());
    lua_pushlstring(L, e.out().data(), e.out().size());
    return 1;
  });
}

int NullToString(lua_State* L) {
  lua_pushliteral(L, "braid.json.null");
  return 1;
}

}  // namespace

int luaopen_braid_json(lua_State* L) {
  lua_createtable(L, 0, 3);
  const int lib = lua_gettop(L);
  // null: a userdata of its own, with a locked metatable.
  lua_newuserdatauv(L, 0, 0);
  luaL_newmetatable(L, kNullMeta);
  lua_pushcfunction(L, NullToString);
  lua_setfield(L, -2, "__tostring");
  lua_pushliteral(L, "locked");
  lua_setfield(L, -2, "__metatable");
  lua_setmetatable(L, -2);
  lua_pushvalue(L, -1);
  lua_setfield(L, lib, "null");
  lua_pushvalue(L, -1);
  lua_pushcclosure(L, Decode, 1);
  lua_setfield(L, lib, "decode");
  lua_pushcclosure(L, Encode, 1);
  lua_setfield(L, lib, "encode");
  return 1;
}

}  // namespace braid::lua
