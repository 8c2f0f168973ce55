package devstore

// For the tests of package devstore_test, which use devstoretest and so
// cannot be in package devstore.
var (
	StartFerretDBOn = startFerretDBOn
	HavePostgres    = havePostgres
	ClientConfig    = clientConfig
)

const ClockTolerance = clockTolerance

// ForgetClockShim makes the next ClockShim build the shim again, and
// returns what puts the one built before back.
func ForgetClockShim() (restore func()) {
	shimBuild.Lock()
	built := shimBuild.path
	shimBuild.path = ""
	shimBuild.Unlock()
	return func() {
		shimBuild.Lock()
		shimBuild.path = built
		shimBuild.Unlock()
	}
}
