#include "clients/common/channel.h"

#include <cstdlib>
#include <utility>
#include <vector>

#include <grpcpp/support/client_interceptor.h>

#include "absl/strings/str_cat.h"
#include "base/file_io.h"

namespace steady {

namespace {

// Adds the API key to every call's metadata. An interceptor rather than call credentials: gRPC sends
// call credentials over TLS only, and plaintext on loopback carries keys too.
class ApiKeyInterceptor : public grpc::experimental::Interceptor {
 public:
  explicit ApiKeyInterceptor(const std::string* header) : header_(header) {}
  void Intercept(grpc::experimental::InterceptorBatchMethods* methods) override {
    if (methods->QueryInterceptionHookPoint(grpc::experimental::InterceptionHookPoints::PRE_SEND_INITIAL_METADATA)) {
      methods->GetSendInitialMetadata()->insert({"authorization", *header_});
    }
    methods->Proceed();
  }

 private:
  const std::string* header_;
};

class ApiKeyInterceptorFactory : public grpc::experimental::ClientInterceptorFactoryInterface {
 public:
  explicit ApiKeyInterceptorFactory(std::string key) : header_("Bearer " + std::move(key)) {}
  grpc::experimental::Interceptor* CreateClientInterceptor(grpc::experimental::ClientRpcInfo*) override {
    return new ApiKeyInterceptor(&header_);  // the factory outlives the channel's calls
  }

 private:
  const std::string header_;
};

}  // namespace

absl::StatusOr<ChannelOptions> ChannelOptionsFromFlags(const Flags& flags, std::string addr) {
  ChannelOptions o;
  o.addr = std::move(addr);
  const char* env_key = std::getenv("STEADY_API_KEY");
  o.api_key = flags.Get("api-key", env_key ? env_key : "");
  o.tls_ca = flags.Get("tls-ca", "");
  o.tls_cert = flags.Get("tls-cert", "");
  o.tls_key = flags.Get("tls-key", "");
  o.tls_server_name = flags.Get("tls-server-name", "");
  if (o.tls_cert.empty() != o.tls_key.empty()) {
    return absl::InvalidArgumentError("--tls-cert and --tls-key go together: give both");
  }
  if (o.tls_ca.empty() && (!o.tls_cert.empty() || !o.tls_server_name.empty())) {
    return absl::InvalidArgumentError(absl::StrCat(!o.tls_cert.empty() ? "--tls-cert" : "--tls-server-name",
                                                   " needs --tls-ca (TLS to the server)"));
  }
  return o;
}

absl::StatusOr<std::shared_ptr<grpc::Channel>> OpenChannel(const ChannelOptions& o, const grpc::ChannelArguments& args) {
  std::shared_ptr<grpc::ChannelCredentials> credentials = grpc::InsecureChannelCredentials();
  grpc::ChannelArguments channel_args = args;
  channel_args.SetMaxReceiveMessageSize(kMaxMessageBytes);
  channel_args.SetMaxSendMessageSize(kMaxMessageBytes);
  if (!o.tls_ca.empty()) {
    grpc::SslCredentialsOptions tls;
    auto ca = ReadWholeFile(o.tls_ca);
    if (!ca.ok()) return ca.status();
    tls.pem_root_certs = *ca;
    if (!o.tls_cert.empty()) {
      auto cert = ReadWholeFile(o.tls_cert);
      auto key = ReadWholeFile(o.tls_key);
      if (!cert.ok()) return cert.status();
      if (!key.ok()) return key.status();
      tls.pem_cert_chain = *cert;
      tls.pem_private_key = *key;
    }
    credentials = grpc::SslCredentials(tls);
    if (!o.tls_server_name.empty()) channel_args.SetSslTargetNameOverride(o.tls_server_name);
  }
  std::vector<std::unique_ptr<grpc::experimental::ClientInterceptorFactoryInterface>> interceptors;
  if (!o.api_key.empty()) interceptors.push_back(std::make_unique<ApiKeyInterceptorFactory>(o.api_key));
  return grpc::experimental::CreateCustomChannelWithInterceptors(o.addr, credentials, channel_args,
                                                                 std::move(interceptors));
}

}  // namespace steady
