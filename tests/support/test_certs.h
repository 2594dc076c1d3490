// Certificates for a TLS test, made with openssl in a temporary folder: a
// CA, and a server and a client certificate it signed (both for 127.0.0.1).
#pragma once

#include <gtest/gtest.h>
#include <stdlib.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

namespace kiln::testing {

struct TestCerts {
  std::string dir;
  bool made = false;
  TestCerts() {
    // A folder of its own: tests run side by side.
    std::string tmpl = ::testing::TempDir() + "kiln_tls_XXXXXX";
    if (mkdtemp(tmpl.data()) == nullptr) return;
    dir = tmpl + "/";
    std::string cmd =
        "cd '" + dir +
        "' && exec >openssl.log 2>&1 && "
        "openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes "
        "-keyout ca.key -out ca.pem -days 2 -subj '/CN=kiln test CA' && "
        "for who in server client; do "
        "openssl req -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -keyout $who.key "
        "-out $who.csr -subj \"/CN=kiln test $who\" && "
        "printf 'subjectAltName=IP:127.0.0.1,DNS:localhost\\n' > $who.ext && "
        "openssl x509 -req -in $who.csr -CA ca.pem -CAkey ca.key -CAcreateserial -days 2 "
        "-out $who.pem -extfile $who.ext || exit 1; done";
    made = std::system(cmd.c_str()) == 0;
  }
  ~TestCerts() { std::filesystem::remove_all(dir); }
  std::string operator()(const std::string& name) const { return dir + name; }
  // What openssl said, for a failure message.
  std::string log() const {
    std::ifstream in(dir + "openssl.log");
    std::ostringstream text;
    text << in.rdbuf();
    return text.str();
  }
};

}  // namespace kiln::testing
