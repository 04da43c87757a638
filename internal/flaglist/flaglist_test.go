package flaglist

import (
	"errors"
	"reflect"
	"strconv"
	"testing"
)

func TestItems(t *testing.T) {
	for in, want := range map[string][]string{"": nil, " , ,": nil, "a": {"a"}, " a , b,,c ": {"a", "b", "c"}} {
		if got := Items(in); !reflect.DeepEqual(got, want) {
			t.Errorf("Items(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestParse(t *testing.T) {
	positive := func(s string) (float64, error) {
		v, err := strconv.ParseFloat(s, 64)
		if err == nil && v <= 0 {
			err = errors.New("not positive")
		}
		return v, err
	}
	got, errs := Parse("--time-scale", "1, 10,x,-2", "a number > 0", positive)
	if !reflect.DeepEqual(got, []float64{1, 10}) || len(errs) != 2 ||
		errs[0].Error() != `--time-scale: "x" is not a number > 0` || errs[1].Error() != `--time-scale: "-2" is not a number > 0` {
		t.Fatalf("Parse = %v %v", got, errs)
	}
}
