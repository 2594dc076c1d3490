// Content-addressed blobs in kilnd's data directory (DIR/blobs/SHA256): a model's file as a
// client uploads it, a compiled model's weights as kilnd makes them. A blob is written once,
// checked against its SHA-256 as it arrives, and never uploaded twice: a client asks which
// blobs kilnd has (StatBlobs) before it sends any. Among kilnd replicas (replica.h) a blob
// kept by one is published to the others (BlobShare), and one missing here is fetched from
// there when it is asked for.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>

namespace kiln::server {

// Where blobs are shared with other kilnd replicas.
class BlobShare {
 public:
  virtual ~BlobShare() = default;
  // Publishes the blob in `file` (its SHA-256 checked already); one published before is left.
  virtual void publish(const std::string& sha256, const std::string& file, uint64_t size) = 0;
  // The size of a blob another replica published; none when no replica did.
  virtual std::optional<uint64_t> size(const std::string& sha256) = 0;
  // The published blob's bytes, a piece at a time, in order.
  virtual void fetch(const std::string& sha256,
                     const std::function<void(std::string_view)>& piece) = 0;
};

class BlobStore {
 public:
  // Keeps blobs in `dir` (made when missing), each at most max_bytes. Throws std::runtime_error
  // when the folder cannot be made.
  BlobStore(std::string dir, uint64_t max_bytes);
  const std::string& dir() const { return dir_; }
  // Removes what uploads cut short by a crash left behind: for the process that owns the store
  // (kilnd at start), never for one that only reads it (kiln-runner).
  void remove_unfinished();
  uint64_t max_bytes() const { return max_bytes_; }
  // Shares the blobs with other replicas through `share` (outliving this), from now on.
  void share(BlobShare* share) { share_ = share; }

  // Whether the blob is here (fetched from another replica when it published it), and its size
  // (0 when it is not).
  bool has(const std::string& sha256) const;
  uint64_t size(const std::string& sha256) const;
  // The blob's file. Refusal (request.h) NOT_FOUND when it is not here, INVALID_ARGUMENT when
  // `sha256` is not 64 lowercase hex digits; `what` names it in the message ("op.model").
  std::string path(const std::string& sha256, std::string_view what) const;
  // Keeps `bytes` (kilnd's own: a model's weights) and returns their SHA-256.
  std::string put(std::string_view bytes);

  // One blob arriving in pieces: refused at begin (a bad hash, a size past the limit) or at
  // the first piece past the size it announced; finish() checks the size and the SHA-256 and
  // only then makes it visible. A blob that is already here is read and dropped, and an
  // upload abandoned before finish() leaves nothing.
  class Upload {
   public:
    Upload(Upload&&) noexcept;
    ~Upload();
    void write(std::string_view piece);
    uint64_t received() const { return received_; }
    void finish();

   private:
    friend class BlobStore;
    Upload(BlobStore& store, std::string sha256, uint64_t size);
    BlobStore* store_;
    bool publish_ = true;  // false: fetched from where it was published
    std::string sha256_, temp_;
    uint64_t size_ = 0, received_ = 0;
    int fd_ = -1;
    void* hash_ = nullptr;  // kiln::Sha256, fed the pieces unframed
  };
  Upload begin(const std::string& sha256, uint64_t size);

 private:
  // Whether the blob is on this machine's disk.
  bool here(const std::string& sha256) const;
  // Fetches a blob another replica published; false when none did.
  bool fetch(const std::string& sha256) const;

  std::string dir_;
  uint64_t max_bytes_;
  BlobShare* share_ = nullptr;
};

// Whether s is a SHA-256 as kiln writes one: 64 lowercase hex digits.
bool is_sha256(std::string_view s);

}  // namespace kiln::server
