// memcal-measure generic ATen call: runs any ATen operator by its schema name through the
// dispatcher (autograd and autocast included, as a Python call of `torch.ops.aten.<op>` does), for
// the graph format's generic `aten` node (docs/graph-format.md, "The generic `aten` node").
// Compiled by build.rs with the `cc` crate against libtorch's headers, beside counters.cpp.
//
// Every function is `extern "C"` and never lets a C++ exception cross into Rust: failures are
// reported through the return value and a message buffer.
//
// ## The argument encoding
//
// The arguments come as one text, a JSON object (the harness writes it; parsed here by hand, as
// libtorch has no JSON library to rely on):
//
//     {"args": [v, ...], "kwargs": {"name": v, ...}}
//
// `args` are the positional arguments in schema order (the schema's non-keyword-only ones);
// `kwargs` name any argument by its schema name. Either key may be left out. A value `v` is
//
//   null                       None
//   true, false                a bool
//   12, -3                     an integer (no `.` and no exponent)
//   1.5, 1e-05, inf, -inf, nan a float (JSON's number with a `.` or an exponent; the three bare
//                              words, which JSON lacks, for masks' `-inf` fills)
//   "text"                     a string (JSON escapes \" \\ \/ \b \f \n \r \t \uXXXX)
//   [v, ...]                   a list
//   {"tensor": k}              tensor k of the array passed beside the text
//   {"dtype": "float32"}       a ScalarType by torch's name (float32, float, bfloat16, int64, ...)
//   {"other": "<torch text>"}  a layout, memory format or device as torch prints it
//                              (`torch.strided`, `torch.contiguous_format`, `device(type='cpu')`)
//
// Each schema argument takes the value given positionally or by keyword, else the schema's
// default, else None when its type is optional; anything else is an error naming the argument.
// Values are converted by the argument's type: Tensor (a number becomes a wrapped scalar tensor,
// as Python does), Tensor? , Tensor[], Tensor?[], int / SymInt (and their lists; a bare int
// for `int[N]` is repeated N times, as Python does), float, Scalar (int, float or bool), bool,
// str, ScalarType, Layout, MemoryFormat, Device, Generator? (None). A Device argument that is
// given is the run's device (the `device` parameter), whatever the text: a graph traced on one
// device is measured on another. An `{"other": ...}` value that cannot be mapped leaves the
// argument at its schema default when it has one.
//
// ## The outputs
//
// The op's returns, flattened in order: a Tensor (or Tensor?) return is one entry, a Tensor[]
// return one entry per element, any other return (an int, a float) one empty entry. An empty
// entry (None, or a non-tensor) comes back as a null pointer. Each non-null entry is a new
// `at::Tensor*` the caller owns (tch's `Tensor::from_ptr`).

#include <ATen/ATen.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/core/function_schema.h>
#include <ATen/core/ivalue.h>
#include <ATen/core/stack.h>
#include <ATen/ScalarOps.h>
#include <c10/util/Exception.h>

#include <cerrno>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <limits>
#include <optional>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

namespace {

void write_message(const std::string& text, char* buf, size_t len) {
  if (buf == nullptr || len == 0) return;
  size_t n = text.size() < len - 1 ? text.size() : len - 1;
  std::memcpy(buf, text.data(), n);
  buf[n] = '\0';
}

// One value of the encoding.
struct Val {
  enum Kind { Null, Bool, Int, Float, Str, List, Tensor, DType, Other } kind = Null;
  bool b = false;
  int64_t i = 0;
  double f = 0;
  std::string s;
  std::vector<Val> list;

  std::string describe() const {
    switch (kind) {
      case Null: return "null";
      case Bool: return b ? "true" : "false";
      case Int: return std::to_string(i);
      case Float: return std::to_string(f);
      case Str: return "\"" + s + "\"";
      case List: return "a list of " + std::to_string(list.size());
      case Tensor: return "{\"tensor\": " + std::to_string(i) + "}";
      case DType: return "{\"dtype\": \"" + s + "\"}";
      case Other: return "{\"other\": \"" + s + "\"}";
    }
    return "?";
  }
};

struct Call {
  std::vector<Val> args;
  std::vector<std::pair<std::string, Val>> kwargs;
};

// A parser of the encoding (a JSON subset plus `inf`, `-inf` and `nan`).
class Parser {
 public:
  explicit Parser(const char* text) : p_(text), start_(text) {}

  Call call() {
    Call c;
    ws();
    expect('{');
    ws();
    if (peek() == '}') {
      ++p_;
    } else {
      for (;;) {
        ws();
        std::string key = string();
        ws();
        expect(':');
        ws();
        if (key == "args") {
          Val v = value();
          if (v.kind != Val::List) fail("`args` must be a list");
          c.args = std::move(v.list);
        } else if (key == "kwargs") {
          expect('{');
          ws();
          if (peek() == '}') {
            ++p_;
          } else {
            for (;;) {
              ws();
              std::string name = string();
              ws();
              expect(':');
              ws();
              c.kwargs.emplace_back(name, value());
              ws();
              if (peek() == ',') {
                ++p_;
                continue;
              }
              expect('}');
              break;
            }
          }
        } else {
          fail("unknown key `" + key + "` (the call takes `args` and `kwargs`)");
        }
        ws();
        if (peek() == ',') {
          ++p_;
          continue;
        }
        expect('}');
        break;
      }
    }
    ws();
    if (*p_ != '\0') fail("text after the call's object");
    return c;
  }

 private:
  const char* p_;
  const char* start_;

  [[noreturn]] void fail(const std::string& what) const {
    throw std::runtime_error("argument encoding, at byte " + std::to_string(p_ - start_) + ": " +
                             what);
  }

  char peek() const { return *p_; }

  void ws() {
    while (*p_ == ' ' || *p_ == '\n' || *p_ == '\t' || *p_ == '\r') ++p_;
  }

  void expect(char c) {
    if (*p_ != c) fail(std::string("expected `") + c + "`");
    ++p_;
  }

  bool word(const char* w) {
    size_t n = std::strlen(w);
    if (std::strncmp(p_, w, n) != 0) return false;
    char next = p_[n];
    if ((next >= 'a' && next <= 'z') || (next >= 'A' && next <= 'Z') || next == '_') return false;
    p_ += n;
    return true;
  }

  static void utf8(std::string& out, uint32_t cp) {
    if (cp < 0x80) {
      out += static_cast<char>(cp);
    } else if (cp < 0x800) {
      out += static_cast<char>(0xC0 | (cp >> 6));
      out += static_cast<char>(0x80 | (cp & 0x3F));
    } else {
      out += static_cast<char>(0xE0 | (cp >> 12));
      out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
      out += static_cast<char>(0x80 | (cp & 0x3F));
    }
  }

  std::string string() {
    expect('"');
    std::string out;
    for (;;) {
      char c = *p_;
      if (c == '\0') fail("a string is not closed");
      ++p_;
      if (c == '"') break;
      if (c != '\\') {
        out += c;
        continue;
      }
      char e = *p_++;
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
          uint32_t cp = 0;
          for (int k = 0; k < 4; ++k) {
            char h = *p_++;
            cp <<= 4;
            if (h >= '0' && h <= '9') cp |= h - '0';
            else if (h >= 'a' && h <= 'f') cp |= h - 'a' + 10;
            else if (h >= 'A' && h <= 'F') cp |= h - 'A' + 10;
            else fail("a bad \\u escape");
          }
          utf8(out, cp);
          break;
        }
        default: fail(std::string("a bad escape \\") + e);
      }
    }
    return out;
  }

  Val number() {
    const char* s = p_;
    bool is_float = false;
    if (*p_ == '-' || *p_ == '+') ++p_;
    while ((*p_ >= '0' && *p_ <= '9') || *p_ == '.' || *p_ == 'e' || *p_ == 'E' ||
           ((*p_ == '-' || *p_ == '+') && (p_[-1] == 'e' || p_[-1] == 'E'))) {
      if (*p_ == '.' || *p_ == 'e' || *p_ == 'E') is_float = true;
      ++p_;
    }
    std::string text(s, p_);
    if (text.empty() || text == "-" || text == "+") fail("expected a value");
    Val v;
    char* end = nullptr;
    errno = 0;
    if (is_float) {
      v.kind = Val::Float;
      v.f = std::strtod(text.c_str(), &end);
    } else {
      v.kind = Val::Int;
      v.i = std::strtoll(text.c_str(), &end, 10);
    }
    if (end == nullptr || *end != '\0') fail("`" + text + "` is not a number");
    if (errno == ERANGE && !is_float) fail("`" + text + "` is out of the int64 range");
    return v;
  }

  Val value() {
    ws();
    Val v;
    char c = peek();
    if (c == '"') {
      v.kind = Val::Str;
      v.s = string();
    } else if (c == '[') {
      ++p_;
      v.kind = Val::List;
      ws();
      if (peek() == ']') {
        ++p_;
        return v;
      }
      for (;;) {
        v.list.push_back(value());
        ws();
        if (peek() == ',') {
          ++p_;
          continue;
        }
        expect(']');
        break;
      }
    } else if (c == '{') {
      ++p_;
      ws();
      std::string key = string();
      ws();
      expect(':');
      ws();
      if (key == "tensor") {
        Val k = number();
        if (k.kind != Val::Int || k.i < 0) fail("`tensor` must be an index");
        v.kind = Val::Tensor;
        v.i = k.i;
      } else if (key == "dtype" || key == "other") {
        v.kind = key == "dtype" ? Val::DType : Val::Other;
        v.s = string();
      } else {
        fail("unknown value {\"" + key + "\": ...} ({\"tensor\": k}, {\"dtype\": name} or "
             "{\"other\": text})");
      }
      ws();
      expect('}');
    } else if (word("null")) {
      v.kind = Val::Null;
    } else if (word("true")) {
      v.kind = Val::Bool;
      v.b = true;
    } else if (word("false")) {
      v.kind = Val::Bool;
      v.b = false;
    } else if (word("inf") || word("Infinity")) {
      v.kind = Val::Float;
      v.f = std::numeric_limits<double>::infinity();
    } else if (word("-inf") || word("-Infinity")) {
      v.kind = Val::Float;
      v.f = -std::numeric_limits<double>::infinity();
    } else if (word("nan") || word("NaN")) {
      v.kind = Val::Float;
      v.f = std::numeric_limits<double>::quiet_NaN();
    } else {
      v = number();
    }
    return v;
  }
};

// What a conversion may read besides the value.
struct Context {
  at::Tensor* const* tensors;
  size_t n_tensors;
  c10::Device device;
  std::string op;  // aten::mul.Tensor, for messages
};

// A value that is not converted but left at the schema's default.
struct UseDefault {};

[[noreturn]] void bad(const std::string& arg, const std::string& what) {
  throw std::runtime_error("argument `" + arg + "`: " + what);
}

bool float_word(const Val& v, double* out) {
  if (v.kind != Val::Str) return false;
  if (v.s == "inf" || v.s == "Infinity") *out = std::numeric_limits<double>::infinity();
  else if (v.s == "-inf" || v.s == "-Infinity") *out = -std::numeric_limits<double>::infinity();
  else if (v.s == "nan" || v.s == "NaN") *out = std::numeric_limits<double>::quiet_NaN();
  else return false;
  return true;
}

std::string strip_torch(const std::string& s) {
  return s.rfind("torch.", 0) == 0 ? s.substr(6) : s;
}

c10::ScalarType scalar_type(const std::string& name, const std::string& arg) {
  std::string n = strip_torch(name);
  if (n == "float32" || n == "float") return at::kFloat;
  if (n == "float64" || n == "double") return at::kDouble;
  if (n == "float16" || n == "half") return at::kHalf;
  if (n == "bfloat16") return at::kBFloat16;
  if (n == "int64" || n == "long") return at::kLong;
  if (n == "int32" || n == "int") return at::kInt;
  if (n == "int16" || n == "short") return at::kShort;
  if (n == "int8") return at::kChar;
  if (n == "uint8") return at::kByte;
  if (n == "bool") return at::kBool;
  if (n == "complex64" || n == "cfloat") return at::kComplexFloat;
  if (n == "complex128" || n == "cdouble") return at::kComplexDouble;
  bad(arg, "unknown dtype `" + name + "`");
}

const at::Tensor& tensor_at(const Val& v, const Context& ctx, const std::string& arg) {
  if (static_cast<size_t>(v.i) >= ctx.n_tensors || ctx.tensors[v.i] == nullptr)
    bad(arg, "{\"tensor\": " + std::to_string(v.i) + "}, but " + std::to_string(ctx.n_tensors) +
                 " tensors are given");
  const at::Tensor& t = *ctx.tensors[v.i];
  if (!t.defined()) bad(arg, "tensor " + std::to_string(v.i) + " is undefined");
  return t;
}

c10::Scalar scalar_of(const Val& v, const std::string& arg, const char* what) {
  double f = 0;
  switch (v.kind) {
    case Val::Int: return c10::Scalar(v.i);
    case Val::Float: return c10::Scalar(v.f);
    case Val::Bool: return c10::Scalar(v.b);
    default:
      if (float_word(v, &f)) return c10::Scalar(f);
      bad(arg, std::string("expected ") + what + ", found " + v.describe());
  }
}

c10::IValue convert(const Val& v, const c10::TypePtr& type, const Context& ctx,
                    const std::string& arg, std::optional<int32_t> n);

// The element type a list of `elem` is made with (SymInt as int, as torch's fake types do).
c10::TypePtr list_elem(const c10::TypePtr& elem) {
  if (elem->kind() == c10::TypeKind::SymIntType) return c10::IntType::get();
  if (elem->kind() == c10::TypeKind::SymFloatType) return c10::FloatType::get();
  if (elem->kind() == c10::TypeKind::SymBoolType) return c10::BoolType::get();
  if (auto o = elem->cast<c10::OptionalType>()) {
    auto inner = list_elem(o->getElementType());
    if (inner != o->getElementType()) return c10::OptionalType::create(inner);
  }
  return elem;
}

c10::IValue convert_list(const Val& v, const c10::ListTypePtr& type, const Context& ctx,
                         const std::string& arg, std::optional<int32_t> n) {
  const c10::TypePtr& elem = type->getElementType();
  std::vector<const Val*> items;
  Val repeated;
  if (v.kind == Val::List) {
    for (const Val& x : v.list) items.push_back(&x);
  } else if (v.kind != Val::Null && n.has_value()) {
    // Python's `int[2] stride=1`: one value for every entry.
    for (int32_t k = 0; k < *n; ++k) items.push_back(&v);
  } else if (v.kind == Val::Tensor && elem->kind() == c10::TypeKind::TensorType) {
    items.push_back(&v);
  } else {
    bad(arg, "expected a list (" + type->str() + "), found " + v.describe());
  }
  c10::impl::GenericList list(list_elem(elem));
  list.reserve(items.size());
  for (size_t k = 0; k < items.size(); ++k) {
    list.push_back(convert(*items[k], elem, ctx, arg + "[" + std::to_string(k) + "]", std::nullopt));
  }
  return c10::IValue(std::move(list));
}

c10::IValue convert(const Val& v, const c10::TypePtr& type, const Context& ctx,
                    const std::string& arg, std::optional<int32_t> n) {
  using K = c10::TypeKind;
  switch (type->kind()) {
    case K::OptionalType:
      if (v.kind == Val::Null) return c10::IValue();
      return convert(v, type->expectRef<c10::OptionalType>().getElementType(), ctx, arg, n);
    case K::TensorType:
      if (v.kind == Val::Tensor) return c10::IValue(tensor_at(v, ctx, arg));
      if (v.kind == Val::Int || v.kind == Val::Float || v.kind == Val::Bool) {
        // A number where a tensor is expected: a wrapped CPU number, as Python passes it.
        at::Tensor t = c10::scalar_to_tensor(scalar_of(v, arg, "a tensor"));
        t.unsafeGetTensorImpl()->set_wrapped_number(true);
        return c10::IValue(std::move(t));
      }
      bad(arg, "expected a tensor ({\"tensor\": k}), found " + v.describe());
    case K::ListType:
      return convert_list(v, type->expect<c10::ListType>(), ctx, arg, n);
    case K::IntType:
    case K::SymIntType:
      if (v.kind == Val::Int) return c10::IValue(v.i);
      if (v.kind == Val::Bool) return c10::IValue(static_cast<int64_t>(v.b));
      bad(arg, "expected an int, found " + v.describe());
    case K::FloatType:
    case K::SymFloatType: {
      double f = 0;
      if (v.kind == Val::Float) return c10::IValue(v.f);
      if (v.kind == Val::Int) return c10::IValue(static_cast<double>(v.i));
      if (float_word(v, &f)) return c10::IValue(f);
      bad(arg, "expected a float, found " + v.describe());
    }
    case K::NumberType:
      return c10::IValue(scalar_of(v, arg, "a Scalar (a number)"));
    case K::BoolType:
    case K::SymBoolType:
      if (v.kind == Val::Bool) return c10::IValue(v.b);
      if (v.kind == Val::Int && (v.i == 0 || v.i == 1)) return c10::IValue(v.i == 1);
      bad(arg, "expected a bool, found " + v.describe());
    case K::StringType:
      if (v.kind == Val::Str) return c10::IValue(v.s);
      bad(arg, "expected a string, found " + v.describe());
    case K::ScalarTypeType:
      if (v.kind == Val::DType || v.kind == Val::Str || v.kind == Val::Other)
        return c10::IValue(scalar_type(v.s, arg));
      if (v.kind == Val::Int) return c10::IValue(v.i);
      bad(arg, "expected a dtype ({\"dtype\": \"float32\"}), found " + v.describe());
    case K::LayoutType: {
      if (v.kind == Val::Int) return c10::IValue(v.i);
      if (v.kind != Val::Other && v.kind != Val::Str)
        bad(arg, "expected a layout ({\"other\": \"torch.strided\"}), found " + v.describe());
      std::string s = strip_torch(v.s);
      if (s == "strided") return c10::IValue(at::kStrided);
      if (s == "sparse_coo") return c10::IValue(at::kSparse);
      throw UseDefault{};
    }
    case K::MemoryFormatType: {
      if (v.kind == Val::Int) return c10::IValue(v.i);
      if (v.kind != Val::Other && v.kind != Val::Str)
        bad(arg, "expected a memory format ({\"other\": \"torch.contiguous_format\"}), found " +
                     v.describe());
      std::string s = strip_torch(v.s);
      if (s == "contiguous_format") return c10::IValue(at::MemoryFormat::Contiguous);
      if (s == "preserve_format") return c10::IValue(at::MemoryFormat::Preserve);
      if (s == "channels_last") return c10::IValue(at::MemoryFormat::ChannelsLast);
      if (s == "channels_last_3d") return c10::IValue(at::MemoryFormat::ChannelsLast3d);
      throw UseDefault{};
    }
    case K::DeviceObjType:
      // Any device given is the run's: a graph traced on one device measures on another.
      if (v.kind == Val::Other || v.kind == Val::Str) return c10::IValue(ctx.device);
      bad(arg, "expected a device ({\"other\": \"cpu\"}), found " + v.describe());
    default:
      if (v.kind == Val::Other) throw UseDefault{};
      bad(arg, "arguments of type " + type->str() + " are not supported (found " +
                   v.describe() + ")");
  }
}

// `mul.Tensor` -> ("aten::mul", "Tensor"); `relu.default` and `relu` -> ("aten::relu", "").
std::pair<std::string, std::string> split_name(const std::string& name) {
  std::string n = name.rfind("aten.", 0) == 0 ? name.substr(5) : name;
  n = n.rfind("aten::", 0) == 0 ? n.substr(6) : n;
  size_t dot = n.find('.');
  std::string op = n.substr(0, dot);
  std::string overload = dot == std::string::npos ? "" : n.substr(dot + 1);
  if (overload == "default") overload = "";
  return {"aten::" + op, overload};
}

// Builds the stack for `schema` from the call.
torch::jit::Stack build_stack(const c10::FunctionSchema& schema, const Call& call,
                              const Context& ctx) {
  const auto& args = schema.arguments();
  size_t positional = 0;
  for (const auto& a : args) {
    if (!a.kwarg_only()) ++positional;
  }
  if (call.args.size() > positional) {
    throw std::runtime_error(std::to_string(call.args.size()) + " positional arguments given; " +
                             ctx.op + " takes " + std::to_string(positional));
  }
  for (const auto& kw : call.kwargs) {
    bool known = false;
    for (const auto& a : args) known = known || a.name() == kw.first;
    if (!known) throw std::runtime_error(ctx.op + " has no argument `" + kw.first + "`");
  }
  torch::jit::Stack stack;
  stack.reserve(args.size());
  size_t next = 0;
  for (const auto& a : args) {
    const Val* given = nullptr;
    if (!a.kwarg_only() && next < call.args.size()) given = &call.args[next];
    if (!a.kwarg_only()) ++next;
    for (const auto& kw : call.kwargs) {
      if (kw.first != a.name()) continue;
      if (given != nullptr) bad(a.name(), "given both by position and by keyword");
      given = &kw.second;
    }
    if (given != nullptr) {
      try {
        stack.push_back(convert(*given, a.real_type(), ctx, a.name(), a.N()));
        continue;
      } catch (const UseDefault&) {
        if (!a.default_value().has_value()) {
          bad(a.name(), "cannot read " + given->describe() + " as " + a.real_type()->str() +
                            ", and the argument has no default");
        }
      }
    }
    if (a.default_value().has_value()) {
      stack.push_back(*a.default_value());
    } else if (a.real_type()->kind() == c10::TypeKind::OptionalType) {
      stack.push_back(c10::IValue());
    } else {
      bad(a.name(), "required by " + ctx.op + " (" + a.real_type()->str() + "), not given");
    }
  }
  return stack;
}

}  // namespace

extern "C" {

// Calls the ATen overload `name` (`mul.Tensor`, `relu.default`; an `aten.` prefix is allowed)
// with the arguments of `args` (the encoding above), whose `{"tensor": k}` is `tensors[k]` (each
// an `at::Tensor*`, as tch's `Tensor::as_ptr` gives), and any Device argument `device` (`cpu`,
// `cuda:0`). Writes the first `cap` flattened outputs to `outs` (each a new `at::Tensor*` the
// caller owns, or null for an empty entry) and their total count to `*n_outs`; outputs past
// `cap` are released here. Returns 0 on success; on failure 1 and a message naming the op and the
// argument in `err` (nothing is written to `outs`).
int memcal_aten_call(const char* name, const char* args, at::Tensor* const* tensors,
                     size_t n_tensors, const char* device, at::Tensor** outs, size_t cap,
                     size_t* n_outs, char* err, size_t err_len) {
  std::string op = name == nullptr ? "" : name;
  try {
    auto [qualified, overload] = split_name(op);
    std::string label = qualified + (overload.empty() ? "" : "." + overload);
    auto handle = c10::Dispatcher::singleton().findSchema({qualified, overload});
    if (!handle.has_value()) {
      throw std::runtime_error("no ATen operator " + label + " is registered in this libtorch");
    }
    Context ctx{tensors, n_tensors, c10::Device(std::string(device == nullptr ? "cpu" : device)),
                label};
    Call call = Parser(args == nullptr ? "{}" : args).call();
    torch::jit::Stack stack = build_stack(handle->schema(), call, ctx);
    handle->callBoxed(&stack);
    std::vector<at::Tensor> flat;
    std::vector<bool> present;
    for (const c10::IValue& r : stack) {
      if (r.isTensor()) {
        flat.push_back(r.toTensor());
        present.push_back(r.toTensor().defined());
      } else if (r.isTensorList()) {
        for (const at::Tensor& t : r.toTensorVector()) {
          flat.push_back(t);
          present.push_back(t.defined());
        }
      } else {
        flat.emplace_back();
        present.push_back(false);
      }
    }
    stack.clear();
    size_t n = flat.size() < cap ? flat.size() : cap;
    for (size_t k = 0; k < n; ++k) {
      outs[k] = present[k] ? new at::Tensor(std::move(flat[k])) : nullptr;
    }
    *n_outs = flat.size();
    return 0;
  } catch (const c10::Error& e) {
    write_message(op + ": " + e.what_without_backtrace(), err, err_len);
    return 1;
  } catch (const std::exception& e) {
    write_message(op + ": " + e.what(), err, err_len);
    return 1;
  } catch (...) {
    write_message(op + ": an unknown C++ exception", err, err_len);
    return 1;
  }
}

}  // extern "C"
