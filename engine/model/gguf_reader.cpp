// GGUF parsing. The file is read through a bounds-checked cursor: every count
// and length is compared with the bytes left *before* anything is allocated or
// read, so a hostile header can neither read past the mapping nor make us
// allocate more than a small multiple of the file size. Layout facts and the
// list of checks: docs/formats.md (GGUF section).
#include "model/gguf_reader.h"

#include <algorithm>
#include <bit>
#include <cstring>
#include <limits>
#include <numeric>
#include <string>
#include <utility>

namespace braid {
namespace {

static_assert(std::endian::native == std::endian::little,
              "GGUF reading assumes a little-endian host");

constexpr uint32_t kGgufMagic = 0x46554747;  // "GGUF" read as a little-endian u32
constexpr uint64_t kMaxStringBytes = uint64_t{1} << 30;
constexpr uint64_t kMaxArrayElems = uint64_t{1} << 30;
constexpr size_t kMaxTensorName = 64;  // names must be shorter (GGML_MAX_NAME)
constexpr uint32_t kMaxDims = 4;       // GGML_MAX_DIMS
constexpr uint64_t kMaxAlignment = uint64_t{1} << 20;
constexpr size_t kDefaultAlignment = 32;
// Smallest possible encodings, used to bound the counts in the header:
// a KV is key length (8) + at least one key byte + type (4) + a 1-byte value;
// a tensor info is name length (8) + one byte + n_dims (4) + one dim (8) +
// type (4) + offset (8).
constexpr uint64_t kMinKvBytes = 8 + 1 + 4 + 1;
constexpr uint64_t kMinTensorInfoBytes = 8 + 1 + 4 + 8 + 4 + 8;

const char* GgufTypeName(GgufType t) {
  switch (t) {
    case GgufType::kU8:
      return "u8";
    case GgufType::kI8:
      return "i8";
    case GgufType::kU16:
      return "u16";
    case GgufType::kI16:
      return "i16";
    case GgufType::kU32:
      return "u32";
    case GgufType::kI32:
      return "i32";
    case GgufType::kF32:
      return "f32";
    case GgufType::kBool:
      return "bool";
    case GgufType::kString:
      return "string";
    case GgufType::kArray:
      return "array";
    case GgufType::kU64:
      return "u64";
    case GgufType::kI64:
      return "i64";
    case GgufType::kF64:
      return "f64";
  }
  return "unknown";
}

bool IsKnownType(uint32_t t) { return t <= static_cast<uint32_t>(GgufType::kF64); }

bool IsUnsigned(GgufType t) {
  return t == GgufType::kU8 || t == GgufType::kU16 || t == GgufType::kU32 || t == GgufType::kU64;
}
bool IsSigned(GgufType t) {
  return t == GgufType::kI8 || t == GgufType::kI16 || t == GgufType::kI32 || t == GgufType::kI64;
}
bool IsFloat(GgufType t) { return t == GgufType::kF32 || t == GgufType::kF64; }

// Bytes of one fixed-size value, or 0 for strings and arrays.
uint64_t FixedSize(GgufType t) {
  switch (t) {
    case GgufType::kU8:
    case GgufType::kI8:
    case GgufType::kBool:
      return 1;
    case GgufType::kU16:
    case GgufType::kI16:
      return 2;
    case GgufType::kU32:
    case GgufType::kI32:
    case GgufType::kF32:
      return 4;
    case GgufType::kU64:
    case GgufType::kI64:
    case GgufType::kF64:
      return 8;
    case GgufType::kString:
    case GgufType::kArray:
      return 0;
  }
  return 0;
}

std::string DescribeType(const GgufValue& v) {
  if (v.type != GgufType::kArray) return GgufTypeName(v.type);
  return std::string("array of ") + GgufTypeName(v.elem_type);
}

// ggml's names for its type ids, so that an unsupported file says which type
// it uses. Empty entries are ids ggml removed.
const char* GgmlTypeName(uint32_t id) {
  static const char* const kNames[] = {
      "f32",     "f16",   "q4_0",   "q4_1",  "",      "",       "q5_0", "q5_1",    "q8_0",
      "q8_1",    "q2_K",  "q3_K",   "q4_K",  "q5_K",  "q6_K",   "q8_K", "iq2_xxs", "iq2_xs",
      "iq3_xxs", "iq1_s", "iq4_nl", "iq3_s", "iq2_s", "iq4_xs", "i8",   "i16",     "i32",
      "i64",     "f64",   "iq1_m",  "bf16",  "",      "",       "",     "tq1_0",   "tq2_0",
      "",        "",      "",       "mxfp4", "nvfp4", "q1_0",   "q2_0"};
  if (id >= sizeof(kNames) / sizeof(kNames[0])) return nullptr;
  return kNames[id];
}

std::string DescribeTypeId(uint32_t id) {
  const char* name = GgmlTypeName(id);
  if (name == nullptr) return "unknown type id " + std::to_string(id);
  if (*name == '\0') return "type id " + std::to_string(id) + " (removed from ggml)";
  return std::string("type ") + name + " (id " + std::to_string(id) + ")";
}

}  // namespace

// Reads one GGUF file into a GgufFile. One instance per parse; not reusable.
class GgufParser {
 public:
  explicit GgufParser(GgufFile* out)
      : out_(out), data_(out->file_->data()), size_(out->file_->size()) {}

  Status Run() {
    BRAID_RETURN_IF_ERROR(ReadHeader());
    BRAID_RETURN_IF_ERROR(ReadMetadata());
    BRAID_RETURN_IF_ERROR(ReadAlignment());
    BRAID_RETURN_IF_ERROR(ReadTensorInfos());
    return LayOutData();
  }

 private:
  // ---- errors ----------------------------------------------------------
  Status Corrupt(const std::string& problem) const {
    return Status::Corruption(out_->path() + ": " + problem);
  }
  Status Unsupported(const std::string& problem) const {
    return Status::Unsupported(out_->path() + ": " + problem);
  }
  std::string At() const { return " (at offset " + std::to_string(pos_) + ")"; }

  // ---- cursor ------------------------------------------------------------
  uint64_t Left() const { return size_ - pos_; }

  Status Need(uint64_t n, const std::string& what) const {
    if (n > Left()) {
      return Corrupt("truncated: " + what + " needs " + std::to_string(n) + " bytes but " +
                     std::to_string(Left()) + " are left" + At());
    }
    return Status::Ok();
  }

  template <typename T>
  Status Read(T* v, const std::string& what) {
    BRAID_RETURN_IF_ERROR(Need(sizeof(T), what));
    std::memcpy(v, data_ + pos_, sizeof(T));
    pos_ += sizeof(T);
    return Status::Ok();
  }

  Status ReadString(std::string* s, const std::string& what) {
    uint64_t len = 0;
    BRAID_RETURN_IF_ERROR(Read(&len, what + " length"));
    if (len > kMaxStringBytes) {
      return Corrupt(what + " length " + std::to_string(len) + " exceeds the limit of 2^30 bytes" +
                     At());
    }
    if (len > Left()) {
      return Corrupt(what + " length " + std::to_string(len) + " exceeds the " +
                     std::to_string(Left()) + " bytes left" + At());
    }
    s->assign(reinterpret_cast<const char*>(data_ + pos_), static_cast<size_t>(len));
    pos_ += len;
    return Status::Ok();
  }

  // ---- header ------------------------------------------------------------
  Status ReadHeader() {
    if (size_ < 4) {
      return Corrupt("not a GGUF file: " + std::to_string(size_) + " bytes is too short");
    }
    uint32_t magic = 0;
    BRAID_RETURN_IF_ERROR(Read(&magic, "magic"));
    if (magic != kGgufMagic) {
      std::string shown;
      for (int i = 0; i < 4; ++i) {
        char c = static_cast<char>(data_[i]);
        shown += (c >= 0x20 && c < 0x7f) ? std::string(1, c) : "\\x" + Hex(data_[i]);
      }
      return Corrupt("not a GGUF file: magic is '" + shown + "', expected 'GGUF'");
    }
    uint32_t version = 0;
    BRAID_RETURN_IF_ERROR(Read(&version, "version"));
    if (version != 0 && (version & 0xFFFF) == 0) {
      return Unsupported("GGUF version field is " + std::to_string(version) +
                         ": the file is byte-swapped (big-endian), which is not supported");
    }
    if (version < 2 || version > 3) {
      return Unsupported("GGUF version " + std::to_string(version) +
                         " is not supported (only versions 2 and 3)");
    }
    out_->version_ = version;
    BRAID_RETURN_IF_ERROR(Read(&tensor_count_, "tensor count"));
    BRAID_RETURN_IF_ERROR(Read(&kv_count_, "metadata count"));
    if (tensor_count_ > Left() / kMinTensorInfoBytes) {
      return Corrupt("tensor count " + std::to_string(tensor_count_) + " cannot fit in the " +
                     std::to_string(Left()) + " bytes left");
    }
    if (kv_count_ > Left() / kMinKvBytes) {
      return Corrupt("metadata count " + std::to_string(kv_count_) + " cannot fit in the " +
                     std::to_string(Left()) + " bytes left");
    }
    return Status::Ok();
  }

  static std::string Hex(uint8_t b) {
    const char* digits = "0123456789abcdef";
    return {digits[b >> 4], digits[b & 15]};
  }

  // ---- metadata ----------------------------------------------------------
  Status ReadMetadata() {
    for (uint64_t i = 0; i < kv_count_; ++i) {
      std::string key;
      BRAID_RETURN_IF_ERROR(ReadString(&key, "metadata key " + std::to_string(i)));
      if (key.empty()) return Corrupt("metadata key " + std::to_string(i) + " is empty" + At());
      if (out_->kv_.count(key) != 0) return Corrupt("duplicate metadata key '" + key + "'" + At());
      uint32_t type = 0;
      BRAID_RETURN_IF_ERROR(Read(&type, "type of key '" + key + "'"));
      if (!IsKnownType(type)) {
        return Unsupported("key '" + key + "' has unknown value type " + std::to_string(type) +
                           At());
      }
      GgufValue value;
      value.type = static_cast<GgufType>(type);
      if (value.type == GgufType::kArray) {
        BRAID_RETURN_IF_ERROR(ReadArray(key, &value));
      } else {
        BRAID_RETURN_IF_ERROR(ReadScalar(key, value.type, &value));
      }
      out_->kv_.emplace(std::move(key), std::move(value));
    }
    return Status::Ok();
  }

  // Reads one non-array value of `type` and stores it widened in `v`.
  Status ReadScalar(const std::string& key, GgufType type, GgufValue* v) {
    const std::string what = "value of '" + key + "'";
    switch (type) {
      case GgufType::kU8:
        return ReadWidened<uint8_t, uint64_t>(what, v);
      case GgufType::kU16:
        return ReadWidened<uint16_t, uint64_t>(what, v);
      case GgufType::kU32:
        return ReadWidened<uint32_t, uint64_t>(what, v);
      case GgufType::kU64:
        return ReadWidened<uint64_t, uint64_t>(what, v);
      case GgufType::kI8:
        return ReadWidened<int8_t, int64_t>(what, v);
      case GgufType::kI16:
        return ReadWidened<int16_t, int64_t>(what, v);
      case GgufType::kI32:
        return ReadWidened<int32_t, int64_t>(what, v);
      case GgufType::kI64:
        return ReadWidened<int64_t, int64_t>(what, v);
      case GgufType::kF32:
        return ReadWidened<float, double>(what, v);
      case GgufType::kF64:
        return ReadWidened<double, double>(what, v);
      case GgufType::kBool: {
        bool b = false;
        BRAID_RETURN_IF_ERROR(ReadBool(key, &b));
        v->value = b;
        return Status::Ok();
      }
      case GgufType::kString: {
        std::string s;
        BRAID_RETURN_IF_ERROR(ReadString(&s, "string value of '" + key + "'"));
        v->value = std::move(s);
        return Status::Ok();
      }
      case GgufType::kArray:
        break;
    }
    return Status::Internal(out_->path() + ": unexpected array in ReadScalar");
  }

  template <typename Stored, typename Wide>
  Status ReadWidened(const std::string& what, GgufValue* v) {
    Stored x{};
    BRAID_RETURN_IF_ERROR(Read(&x, what));
    v->value = static_cast<Wide>(x);
    return Status::Ok();
  }

  Status ReadBool(const std::string& key, bool* b) {
    uint8_t byte = 0;
    BRAID_RETURN_IF_ERROR(Read(&byte, "bool value of '" + key + "'"));
    if (byte > 1) {
      return Corrupt("key '" + key + "' has bool value " + std::to_string(byte) +
                     ", expected 0 or 1" + At());
    }
    *b = byte == 1;
    return Status::Ok();
  }

  Status ReadArray(const std::string& key, GgufValue* v) {
    uint32_t elem = 0;
    BRAID_RETURN_IF_ERROR(Read(&elem, "element type of array '" + key + "'"));
    if (!IsKnownType(elem)) {
      return Unsupported("array '" + key + "' has unknown element type " + std::to_string(elem) +
                         At());
    }
    v->elem_type = static_cast<GgufType>(elem);
    if (v->elem_type == GgufType::kArray) {
      return Unsupported("array '" + key + "' holds nested arrays, which are not supported" + At());
    }
    uint64_t count = 0;
    BRAID_RETURN_IF_ERROR(Read(&count, "length of array '" + key + "'"));
    // Strings take at least their 8-byte length each.
    const uint64_t min_elem = v->elem_type == GgufType::kString ? 8 : FixedSize(v->elem_type);
    if (count > kMaxArrayElems) {
      return Corrupt("array '" + key + "' has " + std::to_string(count) +
                     " elements, over the limit of 2^30" + At());
    }
    if (count > Left() / min_elem) {
      return Corrupt("array '" + key + "' of " + std::to_string(count) + " " +
                     GgufTypeName(v->elem_type) + " elements exceeds the " +
                     std::to_string(Left()) + " bytes left" + At());
    }
    const size_t n = static_cast<size_t>(count);
    switch (v->elem_type) {
      case GgufType::kU8:
        return ReadElems<uint8_t, uint64_t>(key, n, v);
      case GgufType::kU16:
        return ReadElems<uint16_t, uint64_t>(key, n, v);
      case GgufType::kU32:
        return ReadElems<uint32_t, uint64_t>(key, n, v);
      case GgufType::kU64:
        return ReadElems<uint64_t, uint64_t>(key, n, v);
      case GgufType::kI8:
        return ReadElems<int8_t, int64_t>(key, n, v);
      case GgufType::kI16:
        return ReadElems<int16_t, int64_t>(key, n, v);
      case GgufType::kI32:
        return ReadElems<int32_t, int64_t>(key, n, v);
      case GgufType::kI64:
        return ReadElems<int64_t, int64_t>(key, n, v);
      case GgufType::kF32:
        return ReadElems<float, double>(key, n, v);
      case GgufType::kF64:
        return ReadElems<double, double>(key, n, v);
      case GgufType::kBool: {
        std::vector<bool> out(n);
        for (size_t i = 0; i < n; ++i) {
          bool b = false;
          BRAID_RETURN_IF_ERROR(ReadBool(key + "[" + std::to_string(i) + "]", &b));
          out[i] = b;
        }
        v->value = std::move(out);
        return Status::Ok();
      }
      case GgufType::kString: {
        std::vector<std::string> out(n);
        for (size_t i = 0; i < n; ++i) {
          BRAID_RETURN_IF_ERROR(
              ReadString(&out[i], "element " + std::to_string(i) + " of '" + key + "'"));
        }
        v->value = std::move(out);
        return Status::Ok();
      }
      case GgufType::kArray:
        break;
    }
    return Status::Internal(out_->path() + ": unexpected nested array");
  }

  // The element count was checked against the bytes left, so one Need covers all.
  template <typename Stored, typename Wide>
  Status ReadElems(const std::string& key, size_t n, GgufValue* v) {
    BRAID_RETURN_IF_ERROR(Need(n * sizeof(Stored), "array '" + key + "'"));
    std::vector<Wide> out(n);
    for (size_t i = 0; i < n; ++i) {
      Stored x{};
      std::memcpy(&x, data_ + pos_ + i * sizeof(Stored), sizeof(Stored));
      out[i] = static_cast<Wide>(x);
    }
    pos_ += n * sizeof(Stored);
    v->value = std::move(out);
    return Status::Ok();
  }

  Status ReadAlignment() {
    auto it = out_->kv_.find("general.alignment");
    out_->alignment_ = kDefaultAlignment;
    if (it == out_->kv_.end()) return Status::Ok();
    const GgufValue& v = it->second;
    if (v.type != GgufType::kU32) {
      return Corrupt("general.alignment has type " + DescribeType(v) + ", expected u32");
    }
    const uint64_t a = std::get<uint64_t>(v.value);
    if (a == 0 || !std::has_single_bit(a) || a > kMaxAlignment) {
      return Corrupt("general.alignment is " + std::to_string(a) +
                     ", expected a power of two no larger than 2^20");
    }
    out_->alignment_ = static_cast<size_t>(a);
    return Status::Ok();
  }

  // ---- tensor infos --------------------------------------------------------
  Status ReadTensorInfos() {
    out_->tensors_.reserve(static_cast<size_t>(tensor_count_));
    offsets_.reserve(static_cast<size_t>(tensor_count_));
    for (uint64_t i = 0; i < tensor_count_; ++i) {
      TensorInfo t;
      uint64_t offset = 0;
      BRAID_RETURN_IF_ERROR(ReadTensorInfo(i, &t, &offset));
      if (out_->tensor_index_.count(t.name) != 0) {
        return Corrupt("duplicate tensor name '" + t.name + "'" + At());
      }
      out_->tensor_index_.emplace(t.name, out_->tensors_.size());
      out_->tensors_.push_back(std::move(t));
      offsets_.push_back(offset);
    }
    return Status::Ok();
  }

  Status ReadTensorInfo(uint64_t index, TensorInfo* t, uint64_t* offset) {
    BRAID_RETURN_IF_ERROR(ReadString(&t->name, "name of tensor " + std::to_string(index)));
    if (t->name.empty())
      return Corrupt("tensor " + std::to_string(index) + " has an empty name" + At());
    if (t->name.size() >= kMaxTensorName) {
      return Corrupt("tensor name '" + t->name.substr(0, 80) + "' is " +
                     std::to_string(t->name.size()) + " bytes, the limit is 63" + At());
    }
    const std::string tn = "tensor '" + t->name + "'";
    uint32_t n_dims = 0;
    BRAID_RETURN_IF_ERROR(Read(&n_dims, "dimension count of " + tn));
    if (n_dims == 0 || n_dims > kMaxDims) {
      return Corrupt(tn + " has " + std::to_string(n_dims) + " dimensions, expected 1 to 4" + At());
    }
    int64_t elements = 1;
    for (uint32_t d = 0; d < n_dims; ++d) {
      uint64_t ne = 0;
      BRAID_RETURN_IF_ERROR(Read(&ne, "dimension " + std::to_string(d) + " of " + tn));
      if (ne == 0 || ne > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
        return Corrupt(tn + " dimension " + std::to_string(d) + " is " + std::to_string(ne) +
                       ", expected a positive size" + At());
      }
      if (__builtin_mul_overflow(elements, static_cast<int64_t>(ne), &elements)) {
        return Corrupt(tn + " element count overflows 64 bits" + At());
      }
      t->shape.push_back(static_cast<int64_t>(ne));
    }
    uint32_t type_id = 0;
    BRAID_RETURN_IF_ERROR(Read(&type_id, "type of " + tn));
    const kernels::DTypeInfo* info = kernels::GetDTypeInfo(type_id);
    if (info == nullptr || info->block_elems <= 0 || info->block_bytes <= 0) {
      return Unsupported(tn + " has " + DescribeTypeId(type_id) + ", which Braid does not support");
    }
    if (kernels::IsActivationOnly(type_id)) {
      return Unsupported(tn + " has " + DescribeTypeId(type_id) +
                         ", an activation type that Braid does not accept for weights");
    }
    t->type = static_cast<kernels::DType>(type_id);
    if (t->shape[0] % info->block_elems != 0) {
      return Corrupt(tn + " row length " + std::to_string(t->shape[0]) +
                     " is not a multiple of the " + info->name + " block size " +
                     std::to_string(info->block_elems) + At());
    }
    const uint64_t blocks = static_cast<uint64_t>(elements / info->block_elems);
    uint64_t nbytes = 0;
    if (__builtin_mul_overflow(blocks, static_cast<uint64_t>(info->block_bytes), &nbytes) ||
        nbytes > std::numeric_limits<size_t>::max()) {
      return Corrupt(tn + " byte size overflows" + At());
    }
    t->nbytes = static_cast<size_t>(nbytes);
    BRAID_RETURN_IF_ERROR(Read(offset, "data offset of " + tn));
    if (*offset % out_->alignment_ != 0) {
      return Corrupt(tn + " data offset " + std::to_string(*offset) +
                     " is not a multiple of the alignment " + std::to_string(out_->alignment_) +
                     At());
    }
    return Status::Ok();
  }

  // ---- data section ------------------------------------------------------
  Status LayOutData() {
    const uint64_t a = out_->alignment_;
    const uint64_t data_start = (pos_ + a - 1) / a * a;  // pos_ <= size_, a <= 2^20: no overflow
    auto& tensors = out_->tensors_;
    if (tensors.empty()) return Status::Ok();
    if (data_start > size_) {
      return Corrupt("truncated: the tensor data section would start at " +
                     std::to_string(data_start) + ", past the end of the file (" +
                     std::to_string(size_) + " bytes)");
    }
    const uint64_t data_size = size_ - data_start;
    const std::string file_size = " (" + std::to_string(size_) + " bytes)";
    for (size_t i = 0; i < tensors.size(); ++i) {
      const uint64_t off = offsets_[i];
      const uint64_t n = tensors[i].nbytes;
      if (off > data_size || n > data_size - off) {
        const uint64_t begin = off > data_size ? off : data_start + off;
        uint64_t end = 0;
        const std::string end_s =
            __builtin_add_overflow(begin, n, &end) ? "overflow" : std::to_string(end);
        return Corrupt("tensor '" + tensors[i].name + "' data [" + std::to_string(begin) + ", " +
                       end_s + ") extends past end of file" + file_size +
                       (off > data_size ? " (offset relative to the data section)" : ""));
      }
      tensors[i].data = data_ + data_start + off;
    }
    // Overlap: sort by offset and compare each tensor with the one before it.
    std::vector<size_t> order(tensors.size());
    std::iota(order.begin(), order.end(), size_t{0});
    std::sort(order.begin(), order.end(),
              [&](size_t x, size_t y) { return offsets_[x] < offsets_[y]; });
    for (size_t k = 1; k < order.size(); ++k) {
      const size_t prev = order[k - 1];
      const size_t cur = order[k];
      const uint64_t prev_end = offsets_[prev] + tensors[prev].nbytes;  // bounded above
      if (offsets_[cur] < prev_end) {
        return Corrupt("tensor '" + tensors[cur].name + "' data [" +
                       std::to_string(data_start + offsets_[cur]) + ", " +
                       std::to_string(data_start + offsets_[cur] + tensors[cur].nbytes) +
                       ") overlaps tensor '" + tensors[prev].name + "' [" +
                       std::to_string(data_start + offsets_[prev]) + ", " +
                       std::to_string(data_start + prev_end) + ")");
      }
    }
    return Status::Ok();
  }

  GgufFile* out_;
  const uint8_t* data_;
  uint64_t size_;
  uint64_t pos_ = 0;
  uint64_t tensor_count_ = 0;
  uint64_t kv_count_ = 0;
  std::vector<uint64_t> offsets_;  // relative to the data section, parallel to tensors_
};

Result<std::unique_ptr<GgufFile>> GgufFile::Open(const std::string& path) {
  BRAID_ASSIGN_OR_RETURN(std::unique_ptr<MappedFile> file, MappedFile::Open(path));
  return Parse(std::move(file));
}

Result<std::unique_ptr<GgufFile>> GgufFile::Parse(std::unique_ptr<MappedFile> file) {
  std::unique_ptr<GgufFile> out(new GgufFile());
  out->file_ = std::move(file);
  GgufParser parser(out.get());
  BRAID_RETURN_IF_ERROR(parser.Run());
  return out;
}

// ---- lookups -----------------------------------------------------------------

const GgufValue* GgufFile::Find(std::string_view key) const {
  auto it = kv_.find(key);
  return it == kv_.end() ? nullptr : &it->second;
}

const TensorInfo* GgufFile::FindTensor(std::string_view name) const {
  auto it = tensor_index_.find(name);
  return it == tensor_index_.end() ? nullptr : &tensors_[it->second];
}

namespace {

Status NotFoundKey(const std::string& path, std::string_view key) {
  return Status::NotFound(path + ": key '" + std::string(key) + "' not found");
}

Status WrongType(const std::string& path, std::string_view key, const GgufValue& v,
                 const char* wanted) {
  return Status::InvalidArgument(path + ": key '" + std::string(key) + "' has type " +
                                 DescribeType(v) + ", expected " + wanted);
}

Status DoesNotFit(const std::string& path, std::string_view key, const std::string& value,
                  const char* wanted) {
  return Status::InvalidArgument(path + ": key '" + std::string(key) + "' value " + value +
                                 " does not fit " + wanted);
}

}  // namespace

Result<uint64_t> GgufFile::GetUInt(std::string_view key) const {
  const GgufValue* v = Find(key);
  if (v == nullptr) return NotFoundKey(path(), key);
  if (IsUnsigned(v->type)) return std::get<uint64_t>(v->value);
  if (IsSigned(v->type)) {
    const int64_t x = std::get<int64_t>(v->value);
    if (x < 0) return DoesNotFit(path(), key, std::to_string(x), "an unsigned integer");
    return static_cast<uint64_t>(x);
  }
  return WrongType(path(), key, *v, "an integer");
}

Result<int64_t> GgufFile::GetInt(std::string_view key) const {
  const GgufValue* v = Find(key);
  if (v == nullptr) return NotFoundKey(path(), key);
  if (IsSigned(v->type)) return std::get<int64_t>(v->value);
  if (IsUnsigned(v->type)) {
    const uint64_t x = std::get<uint64_t>(v->value);
    if (x > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
      return DoesNotFit(path(), key, std::to_string(x), "a signed 64-bit integer");
    }
    return static_cast<int64_t>(x);
  }
  return WrongType(path(), key, *v, "an integer");
}

Result<double> GgufFile::GetFloat(std::string_view key) const {
  const GgufValue* v = Find(key);
  if (v == nullptr) return NotFoundKey(path(), key);
  if (IsFloat(v->type)) return std::get<double>(v->value);
  if (IsUnsigned(v->type)) return static_cast<double>(std::get<uint64_t>(v->value));
  if (IsSigned(v->type)) return static_cast<double>(std::get<int64_t>(v->value));
  return WrongType(path(), key, *v, "a number");
}

Result<bool> GgufFile::GetBool(std::string_view key) const {
  const GgufValue* v = Find(key);
  if (v == nullptr) return NotFoundKey(path(), key);
  if (v->type != GgufType::kBool) return WrongType(path(), key, *v, "bool");
  return std::get<bool>(v->value);
}

Result<std::string> GgufFile::GetString(std::string_view key) const {
  const GgufValue* v = Find(key);
  if (v == nullptr) return NotFoundKey(path(), key);
  if (v->type != GgufType::kString) return WrongType(path(), key, *v, "string");
  return std::get<std::string>(v->value);
}

Result<std::vector<std::string>> GgufFile::GetStringArray(std::string_view key) const {
  const GgufValue* v = Find(key);
  if (v == nullptr) return NotFoundKey(path(), key);
  if (v->type != GgufType::kArray || v->elem_type != GgufType::kString) {
    return WrongType(path(), key, *v, "array of string");
  }
  return std::get<std::vector<std::string>>(v->value);
}

Result<std::vector<int64_t>> GgufFile::GetIntArray(std::string_view key) const {
  const GgufValue* v = Find(key);
  if (v == nullptr) return NotFoundKey(path(), key);
  if (v->type == GgufType::kArray && IsSigned(v->elem_type)) {
    return std::get<std::vector<int64_t>>(v->value);
  }
  if (v->type == GgufType::kArray && IsUnsigned(v->elem_type)) {
    const auto& in = std::get<std::vector<uint64_t>>(v->value);
    std::vector<int64_t> out(in.size());
    for (size_t i = 0; i < in.size(); ++i) {
      if (in[i] > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
        return DoesNotFit(path(), key, "[" + std::to_string(i) + "] = " + std::to_string(in[i]),
                          "a signed 64-bit integer");
      }
      out[i] = static_cast<int64_t>(in[i]);
    }
    return out;
  }
  return WrongType(path(), key, *v, "array of integers");
}

Result<std::vector<double>> GgufFile::GetFloatArray(std::string_view key) const {
  const GgufValue* v = Find(key);
  if (v == nullptr) return NotFoundKey(path(), key);
  if (v->type == GgufType::kArray) {
    if (IsFloat(v->elem_type)) return std::get<std::vector<double>>(v->value);
    if (IsSigned(v->elem_type)) {
      const auto& in = std::get<std::vector<int64_t>>(v->value);
      return std::vector<double>(in.begin(), in.end());
    }
    if (IsUnsigned(v->elem_type)) {
      const auto& in = std::get<std::vector<uint64_t>>(v->value);
      return std::vector<double>(in.begin(), in.end());
    }
  }
  return WrongType(path(), key, *v, "array of numbers");
}

}  // namespace braid
