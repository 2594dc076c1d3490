// Content-addressed blobs in kilnd's data directory (DIR/blobs/SHA256): a model's file as a
// client uploads it, a compiled model's weights as kilnd makes them. A blob is written once,
// checked against its SHA-256 as it arrives, and never uploaded twice: a client asks which
// blobs kilnd has (StatBlobs) before it sends any.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace kiln::server {

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

  // Whether the blob is here, and its size (0 when it is not).
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
    std::string sha256_, temp_;
    uint64_t size_ = 0, received_ = 0;
    int fd_ = -1;
    void* hash_ = nullptr;  // kiln::Sha256, fed the pieces unframed
  };
  Upload begin(const std::string& sha256, uint64_t size);

 private:
  std::string dir_;
  uint64_t max_bytes_;
};

// Whether s is a SHA-256 as kiln writes one: 64 lowercase hex digits.
bool is_sha256(std::string_view s);

}  // namespace kiln::server
