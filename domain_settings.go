package main

import (
	"fmt"
	"maps"
	"net"
	"slices"
	"strconv"
	"strings"
	"time"
)

// The domain's small shared pieces, settings: the error that refuses a
// setting at start-up (exit 2), whichever layer finds it, and the names a
// setting is given by.

// configError is a start-up setting that cannot work; main exits with code 2
// for it, before anything listens.
type configError struct {
	setting string // the flag or variable, as the user would type it, or the file at fault
	problem string
}

func (e *configError) Error() string { return e.setting + ": " + e.problem }

// envPrefix starts the name of every variable; the rest is the flag's name
// in upper case with '-' as '_' (-read-timeout is PETSTORE_READ_TIMEOUT).
const envPrefix = "PETSTORE_"

// settingName names a setting in errors as both ways of giving it.
func settingName(flagName string) string {
	return "-" + flagName + " (" + envName(flagName) + ")"
}

// checkAddr accepts host:port with a numeric port (0 for any free port).
func checkAddr(addr string) error {
	_, port, err := net.SplitHostPort(addr)
	if err != nil {
		return fmt.Errorf("%q is not host:port: %v", addr, err)
	}
	if _, err := strconv.ParseUint(port, 10, 16); err != nil {
		return fmt.Errorf("%q has port %q; a port is a number from 0 to 65535", addr, port)
	}
	return nil
}

// envName is the variable that sets the flag called name.
func envName(flagName string) string {
	return envPrefix + strings.ToUpper(strings.ReplaceAll(flagName, "-", "_"))
}

// checkDurations refuses the first of settings, by flag name in sorted
// order, that is negative or, when positive is set, zero (with positive
// unset, 0 means no limit).
func checkDurations(positive bool, settings map[string]time.Duration) error {
	for _, name := range slices.Sorted(maps.Keys(settings)) {
		switch d := settings[name]; {
		case d < 0 && !positive:
			return &configError{settingName(name), fmt.Sprintf("%v is negative; use 0 for no limit", d)}
		case d <= 0 && positive:
			return &configError{settingName(name), fmt.Sprintf("%v is not positive", d)}
		}
	}
	return nil
}
