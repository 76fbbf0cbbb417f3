package status

// testSpec stands for a job spec in the tests.
type testSpec struct {
	Model string `json:"model"`
}
