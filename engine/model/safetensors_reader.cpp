// Safetensors parsing. The header is first checked by a streaming pass (syntax,
// nesting depth, duplicate keys) that builds nothing, then parsed into a DOM
// with exceptions disabled; every field is type-checked before it is read, so
// no nlohmann exception can be thrown (a catch-all still guards bad_alloc).
#include "model/safetensors_reader.h"

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <limits>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <utility>

namespace braid {
namespace {

using Json = nlohmann::json;

// Keys and tensor names come from the file: keep them short in messages.
std::string Clip(std::string_view s) {
  if (s.size() <= 96) return std::string(s);
  return std::string(s.substr(0, 96)) + "...";
}

// The streaming checker behind CheckJsonText.
class JsonChecker : public nlohmann::json_sax<Json> {
 public:
  explicit JsonChecker(int max_depth) : max_depth_(max_depth) {}
  const std::string& error() const { return error_; }

  bool null() override { return true; }
  bool boolean(bool) override { return true; }
  bool number_integer(number_integer_t) override { return true; }
  bool number_unsigned(number_unsigned_t) override { return true; }
  bool number_float(number_float_t, const string_t&) override { return true; }
  bool string(string_t&) override { return true; }
  bool binary(binary_t&) override { return true; }
  bool start_object(std::size_t) override {
    if (!Enter()) return false;
    keys_.emplace_back();
    return true;
  }
  bool key(string_t& k) override {
    if (!keys_.back().insert(k).second) {
      error_ = "duplicate key '" + Clip(k) + "'";
      return false;
    }
    return true;
  }
  bool end_object() override {
    keys_.pop_back();
    --depth_;
    return true;
  }
  bool start_array(std::size_t) override { return Enter(); }
  bool end_array() override {
    --depth_;
    return true;
  }
  bool parse_error(std::size_t position, const std::string&,
                   const nlohmann::detail::exception& ex) override {
    error_ = "invalid JSON at byte " + std::to_string(position) + ": " + ex.what();
    return false;
  }

 private:
  bool Enter() {
    if (++depth_ > max_depth_) {
      error_ = "JSON nesting deeper than " + std::to_string(max_depth_);
      return false;
    }
    return true;
  }
  int max_depth_;
  int depth_ = 0;
  std::vector<std::set<std::string>> keys_;
  std::string error_;
};

// Parses text that CheckJsonText accepted. nullopt-like: returns discarded on failure.
Json ParseChecked(std::string_view text) {
  return Json::parse(text.begin(), text.end(), nullptr, /*allow_exceptions=*/false);
}

struct DTypeFacts {
  const char* name;
  kernels::DType type;
  uint64_t size;
};

const DTypeFacts* FindDType(const std::string& name) {
  static const DTypeFacts kSupported[] = {
      {"F32", kernels::DType::kF32, 4},
      {"F16", kernels::DType::kF16, 2},
      {"BF16", kernels::DType::kBF16, 2},
      // FP8 checkpoints: the loader dequantizes these with their scales.
      {"F8_E4M3", kernels::DType::kF8_E4M3, 1},
  };
  for (const DTypeFacts& d : kSupported) {
    if (name == d.name) return &d;
  }
  return nullptr;
}

std::string ShapeString(const std::vector<uint64_t>& dims) {
  std::string s = "[";
  for (size_t i = 0; i < dims.size(); ++i) s += (i ? ", " : "") + std::to_string(dims[i]);
  return s + "]";
}

constexpr size_t kMaxRank = 8;

}  // namespace

Status CheckJsonText(const std::string& name, std::string_view text, int max_depth) {
  JsonChecker checker(max_depth);
  bool ok = false;
  try {
    ok = Json::sax_parse(text.begin(), text.end(), &checker);
  } catch (const std::exception& e) {
    return Status::Corruption(name + ": cannot parse JSON: " + e.what());
  } catch (...) {
    return Status::Corruption(name + ": cannot parse JSON");
  }
  if (!ok) {
    return Status::Corruption(name + ": " +
                              (checker.error().empty() ? "invalid JSON" : checker.error()));
  }
  return Status::Ok();
}

// Reads one safetensors file into a SafetensorsFile.
class SafetensorsParser {
 public:
  explicit SafetensorsParser(SafetensorsFile* out)
      : out_(out), data_(out->file_->data()), size_(out->file_->size()) {}

  Status Run() {
    if (size_ < 8) {
      return Corrupt("file is " + std::to_string(size_) +
                     " bytes, too short for the 8-byte safetensors header length");
    }
    uint64_t n = 0;
    std::memcpy(&n, data_, 8);  // little-endian host (checked in gguf_reader.cpp)
    if (n > kSafetensorsMaxHeaderBytes) {
      return Corrupt("header length " + std::to_string(n) + " exceeds the 100,000,000-byte limit");
    }
    if (n > size_ - 8) {
      return Corrupt("header length " + std::to_string(n) + " exceeds the " +
                     std::to_string(size_ - 8) + " bytes after the length field");
    }
    if (n < 2 || data_[8] != '{') {
      return Corrupt("header does not start with '{'");
    }
    const std::string_view text(reinterpret_cast<const char*>(data_ + 8), n);
    data_start_ = 8 + n;
    data_size_ = size_ - data_start_;
    BRAID_RETURN_IF_ERROR(CheckJsonText(out_->path() + ": header", text));
    try {
      Json header = ParseChecked(text);
      if (header.is_discarded() || !header.is_object()) {
        return Corrupt("header is not a JSON object");
      }
      return ReadHeader(header);
    } catch (const std::exception& e) {
      return Corrupt(std::string("cannot read header: ") + e.what());
    } catch (...) {
      return Corrupt("cannot read header");
    }
  }

 private:
  Status Corrupt(const std::string& problem) const {
    return Status::Corruption(out_->path() + ": " + problem);
  }

  struct Span {
    uint64_t begin, end;
    size_t index;
  };

  Status ReadHeader(const Json& header) {
    std::vector<Span> spans;
    for (auto it = header.begin(); it != header.end(); ++it) {
      const std::string& name = it.key();
      if (name == "__metadata__") {
        BRAID_RETURN_IF_ERROR(ReadMetadata(it.value()));
        continue;
      }
      if (name.empty()) return Corrupt("a tensor has an empty name");
      TensorInfo t;
      t.name = name;
      Span span{};
      BRAID_RETURN_IF_ERROR(ReadEntry(it.value(), &t, &span));
      span.index = out_->tensors_.size();
      if (span.end > span.begin) spans.push_back(span);
      out_->index_.emplace(t.name, out_->tensors_.size());
      out_->tensors_.push_back(std::move(t));
    }
    // Overlap: sort the non-empty spans and compare neighbours.
    std::sort(spans.begin(), spans.end(),
              [](const Span& a, const Span& b) { return a.begin < b.begin; });
    for (size_t k = 1; k < spans.size(); ++k) {
      if (spans[k].begin < spans[k - 1].end) {
        const Span& a = spans[k - 1];
        const Span& b = spans[k];
        return Corrupt("tensor '" + Clip(out_->tensors_[b.index].name) + "' data_offsets [" +
                       std::to_string(b.begin) + ", " + std::to_string(b.end) +
                       ") overlap tensor '" + Clip(out_->tensors_[a.index].name) + "' [" +
                       std::to_string(a.begin) + ", " + std::to_string(a.end) + ")");
      }
    }
    return Status::Ok();
  }

  Status ReadMetadata(const Json& m) {
    if (!m.is_object()) return Corrupt("__metadata__ is not an object");
    for (auto it = m.begin(); it != m.end(); ++it) {
      if (!it.value().is_string()) {
        return Corrupt("__metadata__ value for '" + Clip(it.key()) + "' is not a string");
      }
      out_->metadata_.emplace(it.key(), it.value().get<std::string>());
    }
    return Status::Ok();
  }

  Status ReadEntry(const Json& e, TensorInfo* t, Span* span) {
    const std::string tn = "tensor '" + Clip(t->name) + "'";
    if (!e.is_object()) return Corrupt(tn + " entry is not an object");
    auto dtype_it = e.find("dtype");
    auto shape_it = e.find("shape");
    auto offsets_it = e.find("data_offsets");
    if (dtype_it == e.end() || !dtype_it->is_string()) {
      return Corrupt(tn + " has no string 'dtype'");
    }
    if (shape_it == e.end() || !shape_it->is_array()) {
      return Corrupt(tn + " has no array 'shape'");
    }
    if (offsets_it == e.end() || !offsets_it->is_array() || offsets_it->size() != 2 ||
        !(*offsets_it)[0].is_number_unsigned() || !(*offsets_it)[1].is_number_unsigned()) {
      return Corrupt(tn + " 'data_offsets' is not a pair of non-negative integers");
    }
    const std::string& dtype_name = dtype_it->get_ref<const std::string&>();
    const DTypeFacts* dtype = FindDType(dtype_name);
    if (dtype == nullptr) {
      return Status::Unsupported(out_->path() + ": " + tn + " has dtype " + Clip(dtype_name) +
                                 ", which is not supported (F32, F16, BF16 and F8_E4M3 only)");
    }
    if (shape_it->size() > kMaxRank) {
      return Status::Unsupported(out_->path() + ": " + tn + " has " +
                                 std::to_string(shape_it->size()) + " dimensions (at most 8)");
    }
    std::vector<uint64_t> dims;
    uint64_t elements = 1;
    for (const Json& d : *shape_it) {
      if (!d.is_number_unsigned()) {
        return Corrupt(tn + " shape holds something other than a non-negative integer");
      }
      dims.push_back(d.get<uint64_t>());
    }
    // The product of the non-zero dims must fit int64 even when another dim
    // is 0, so that TensorInfo::elements() can never overflow.
    uint64_t nonzero = 1;
    for (uint64_t d : dims) {
      if (__builtin_mul_overflow(nonzero, std::max<uint64_t>(d, 1), &nonzero) ||
          nonzero > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
        return Corrupt(tn + " shape " + ShapeString(dims) + " element count overflows");
      }
      elements *= d;  // <= nonzero, so no overflow
    }
    uint64_t nbytes = 0;
    if (__builtin_mul_overflow(elements, dtype->size, &nbytes)) {
      return Corrupt(tn + " shape " + ShapeString(dims) + " byte size overflows");
    }
    const uint64_t begin = (*offsets_it)[0].get<uint64_t>();
    const uint64_t end = (*offsets_it)[1].get<uint64_t>();
    const std::string range =
        "data_offsets [" + std::to_string(begin) + ", " + std::to_string(end) + ")";
    if (begin > end) return Corrupt(tn + " " + range + " begin after end");
    if (end > data_size_) {
      return Corrupt(tn + " " + range + " extend past the end of the data (" +
                     std::to_string(data_size_) + " bytes)");
    }
    if (end - begin != nbytes) {
      return Corrupt(tn + " " + range + " hold " + std::to_string(end - begin) + " bytes, but " +
                     dtype->name + " " + ShapeString(dims) + " needs " + std::to_string(nbytes));
    }
    t->type = dtype->type;
    for (auto d = dims.rbegin(); d != dims.rend(); ++d) {  // GGUF order: innermost first
      t->shape.push_back(static_cast<int64_t>(*d));
    }
    t->data = data_ + data_start_ + begin;
    t->nbytes = static_cast<size_t>(nbytes);
    span->begin = begin;
    span->end = end;
    return Status::Ok();
  }

  SafetensorsFile* out_;
  const uint8_t* data_;
  uint64_t size_;
  uint64_t data_start_ = 0;
  uint64_t data_size_ = 0;
};

Result<std::unique_ptr<SafetensorsFile>> SafetensorsFile::Open(const std::string& path) {
  BRAID_ASSIGN_OR_RETURN(std::unique_ptr<MappedFile> file, MappedFile::Open(path));
  return Parse(std::move(file));
}

Result<std::unique_ptr<SafetensorsFile>> SafetensorsFile::Parse(std::unique_ptr<MappedFile> file) {
  std::unique_ptr<SafetensorsFile> out(new SafetensorsFile());
  out->file_ = std::move(file);
  SafetensorsParser parser(out.get());
  BRAID_RETURN_IF_ERROR(parser.Run());
  return out;
}

const TensorInfo* SafetensorsFile::FindTensor(std::string_view name) const {
  auto it = index_.find(name);
  return it == index_.end() ? nullptr : &tensors_[it->second];
}

// ---- checkpoints -----------------------------------------------------------

namespace {

bool EndsWith(std::string_view s, std::string_view suffix) {
  return s.size() >= suffix.size() && s.substr(s.size() - suffix.size()) == suffix;
}

// A shard name from an index must be a plain file name in the index's directory.
bool IsPlainFileName(const std::string& s) {
  return !s.empty() && s != "." && s != ".." && s.find('/') == std::string::npos &&
         s.find('\\') == std::string::npos && s.find('\0') == std::string::npos;
}

// Reads the index's weight_map: tensor name -> shard file name.
Result<std::map<std::string, std::string>> ReadWeightMap(const std::string& path) {
  BRAID_ASSIGN_OR_RETURN(std::unique_ptr<MappedFile> file, MappedFile::Open(path));
  if (file->size() > kSafetensorsMaxHeaderBytes) {
    return Status::Corruption(path + ": index is larger than 100,000,000 bytes");
  }
  const std::string_view text(reinterpret_cast<const char*>(file->data()), file->size());
  BRAID_RETURN_IF_ERROR(CheckJsonText(path, text));
  std::map<std::string, std::string> out;
  try {
    Json index = ParseChecked(text);
    if (index.is_discarded() || !index.is_object()) {
      return Status::Corruption(path + ": index is not a JSON object");
    }
    auto wm = index.find("weight_map");
    if (wm == index.end() || !wm->is_object()) {
      return Status::Corruption(path + ": index has no object 'weight_map'");
    }
    for (auto it = wm->begin(); it != wm->end(); ++it) {
      if (!it.value().is_string() || !IsPlainFileName(it.value().get<std::string>())) {
        return Status::Corruption(path + ": weight_map entry for '" + Clip(it.key()) +
                                  "' is not a plain file name in the index's directory");
      }
      out.emplace(it.key(), it.value().get<std::string>());
    }
  } catch (const std::exception& e) {
    return Status::Corruption(path + ": cannot read index: " + e.what());
  } catch (...) {
    return Status::Corruption(path + ": cannot read index");
  }
  if (out.empty()) return Status::Corruption(path + ": weight_map is empty");
  return out;
}

}  // namespace

Status SafetensorsCheckpoint::Add(std::unique_ptr<SafetensorsFile> shard) {
  for (const TensorInfo& t : shard->tensors()) {
    auto [it, inserted] = tensors_.emplace(t.name, t);
    if (!inserted) {
      return Status::Corruption(shard->path() + ": tensor '" + Clip(t.name) +
                                "' is also stored in another shard");
    }
  }
  shards_.push_back(std::move(shard));
  return Status::Ok();
}

Result<std::unique_ptr<SafetensorsCheckpoint>> SafetensorsCheckpoint::Open(
    const std::string& path) {
  std::unique_ptr<SafetensorsCheckpoint> ck(new SafetensorsCheckpoint());
  if (!EndsWith(path, ".json")) {
    BRAID_ASSIGN_OR_RETURN(std::unique_ptr<SafetensorsFile> file, SafetensorsFile::Open(path));
    BRAID_RETURN_IF_ERROR(ck->Add(std::move(file)));
    return ck;
  }
  BRAID_ASSIGN_OR_RETURN(auto weight_map, ReadWeightMap(path));
  std::set<std::string> shard_names;
  for (const auto& [tensor, shard] : weight_map) shard_names.insert(shard);
  const std::filesystem::path dir = std::filesystem::path(path).parent_path();
  std::map<std::string, const SafetensorsFile*> by_name;
  for (const std::string& shard : shard_names) {
    BRAID_ASSIGN_OR_RETURN(std::unique_ptr<SafetensorsFile> file,
                           SafetensorsFile::Open((dir / shard).string()));
    by_name[shard] = file.get();
    BRAID_RETURN_IF_ERROR(ck->Add(std::move(file)));
  }
  for (const auto& [tensor, shard] : weight_map) {
    if (by_name[shard]->FindTensor(tensor) == nullptr) {
      return Status::Corruption(path + ": index maps tensor '" + Clip(tensor) + "' to '" + shard +
                                "', which does not contain it");
    }
  }
  return ck;
}

}  // namespace braid
