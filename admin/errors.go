package admin

import (
	"errors"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/condisagg/condisagg/route"
)

// errNoReload: the Admin service was built without a reload hook.
var errNoReload = errors.New("admin: reload: no configuration file to reload")

// statusOf maps an Admin error to its gRPC status; it is the only place that does.
func statusOf(err error) error {
	switch {
	case errors.Is(err, errNoReload):
		return status.Error(codes.Unimplemented, err.Error())
	case errors.Is(err, route.ErrInvalidBody):
		return status.Error(codes.InvalidArgument, err.Error())
	case errors.Is(err, route.ErrUnknownModel), errors.Is(err, errUnknownWorker):
		return status.Error(codes.NotFound, err.Error())
	case errors.Is(err, route.ErrNoEligibleWorker), errors.Is(err, route.ErrSubsetNoMatch):
		return status.Error(codes.Unavailable, err.Error())
	default:
		return status.Error(codes.Internal, err.Error())
	}
}
