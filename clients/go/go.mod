// The redq Go client: go get github.com/redq-dev/redq/clients/go/redq@latest
// (README). The versions required are the ones Debian 12 ships, which CI
// builds and tests against offline (offline.sh), except genproto's and
// x/sys's: the ones grpc v1.33.3 and x/net v0.7.0 ask for. They are
// minimums: a build that asks for newer ones gets those.
module github.com/redq-dev/redq/clients/go

go 1.19

require (
	google.golang.org/genproto v0.0.0-20200526211855-cb27e3aa2013
	google.golang.org/grpc v1.33.3
	google.golang.org/protobuf v1.28.1
)

require (
	github.com/golang/protobuf v1.5.2 // indirect
	golang.org/x/net v0.7.0 // indirect
	golang.org/x/sys v0.5.0 // indirect
	golang.org/x/text v0.7.0 // indirect
)
