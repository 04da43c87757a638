package tune

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"runtime/debug"
	"testing"
)

func TestCommitFrom(t *testing.T) {
	const rev = "0123456789abcdef0123456789abcdef01234567"
	stamped := func(kv ...string) *debug.BuildInfo {
		info := &debug.BuildInfo{}
		for i := 0; i < len(kv); i += 2 {
			info.Settings = append(info.Settings, debug.BuildSetting{Key: kv[i], Value: kv[i+1]})
		}
		return info
	}
	gitSays := func(s string, err error) func() (string, error) { return func() (string, error) { return s, err } }
	gitFails := gitSays("", errors.New("exec: git: not found"))
	for _, tc := range []struct {
		name         string
		info         *debug.BuildInfo
		git          func() (string, error)
		want, source string
	}{
		{"build_info_first", stamped("vcs.revision", rev, "vcs.modified", "false"), gitSays("feedface00", nil), rev, CommitFromBuild},
		{"build_info_modified_is_dirty", stamped("vcs.revision", rev, "vcs.modified", "true"), gitFails, rev + "-dirty", CommitFromBuild},
		{"no_vcs_stamp_asks_git", stamped("-buildvcs", "false"), gitSays(rev, nil), rev, CommitFromGit},
		{"no_build_info_asks_git", nil, gitSays(rev+"-dirty", nil), rev + "-dirty", CommitFromGit},
		{"nothing_answers_unknown", stamped(), gitFails, "unknown", CommitUnknown},
		{"git_says_nothing_unknown", nil, gitSays("", nil), "unknown", CommitUnknown},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, source := commitFrom(tc.info, tc.git)
			if got != tc.want || source != tc.source {
				t.Fatalf("commitFrom = %q from %q, want %q from %q", got, source, tc.want, tc.source)
			}
		})
	}
}

func TestIsHex(t *testing.T) {
	for s, want := range map[string]bool{"0123abc": true, "0123456789abcdef0123456789abcdef01234567": true,
		"abc": false, "HEAD": false, "0123abg": false, "": false} {
		if isHex(s) != want {
			t.Errorf("isHex(%q) = %v", s, !want)
		}
	}
}

// TestReportRecordsRun: report.json carries the seed, a commit and the flags it was given.
func TestReportRecordsRun(t *testing.T) {
	c := DefaultConfig()
	c.Synthetic, c.Requests, c.Cluster, c.NoSweep, c.Seed = "vllm-prefix-repetition", 30, "1P1D", true, 7
	flags := map[string]string{"synthetic": "vllm-prefix-repetition", "requests": "30", "seed": "7", "cluster": "1P1D", "no-sweep": "true"}
	w, err := Load(&c)
	if err != nil {
		t.Fatal(err)
	}
	rep, err := Run(context.Background(), &c, w, Options{Flags: flags})
	if err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	if err := rep.WriteJSON(&out); err != nil {
		t.Fatal(err)
	}
	var got struct {
		Seed         *uint64           `json:"seed"`
		Commit       string            `json:"commit"`
		CommitSource string            `json:"commit_source"`
		Flags        map[string]string `json:"flags"`
	}
	if err := json.Unmarshal(out.Bytes(), &got); err != nil {
		t.Fatal(err)
	}
	if got.Seed == nil || *got.Seed != 7 {
		t.Errorf("seed %v, want 7", got.Seed)
	}
	if got.Commit == "" || got.CommitSource == "" || (got.Commit == CommitUnknown) != (got.CommitSource == CommitUnknown) {
		t.Errorf("commit %q from %q", got.Commit, got.CommitSource)
	}
	if len(got.Flags) != len(flags) {
		t.Errorf("flags %v, want %v", got.Flags, flags)
	}
	for k, v := range flags {
		if got.Flags[k] != v {
			t.Errorf("flags[%s] = %q, want %q", k, got.Flags[k], v)
		}
	}
}
