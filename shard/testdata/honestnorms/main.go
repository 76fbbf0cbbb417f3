// Command honestnorms records the gradient norms of an honest run for
// shard's TestOutlierRuleRefusesNoHonestPush: the MLP on MNIST under the
// default job's optimizer (momentum 0.5, lr 0.05), four workers pushing in
// turn, each computing on the parameters it read after its previous push
// (three steps stale), 200 rounds; the parameters cut in three shards.
// Scenario "fixed": every batch 64. Scenario "balance": batches of 8, 40,
// 64 and 152 (base 64, rotated among the workers every 50 rounds), each
// gradient weighted by batch / 64 as the balance layer weights it. Each
// line is a push: its samples and the norm of each shard's slice of its
// (unweighted) gradient.
//
//	go run ./shard/testdata/honestnorms > shard/testdata/honest_norms.txt
//
// -dataset and -rounds record another run (synthetic-mnist converges to
// norms of 1e-5, whose spread is wider), for the test to read with
// DSSP_HONEST_NORMS. -local-rounds records scenario rounds alone (local
// rounds' pseudo-gradients, below) for TestOutlierRuleRefusesNoHonestRound:
//
//	go run ./shard/testdata/honestnorms -dataset synthetic-mnist -local-rounds 300 -inner-lr 0.02 > shard/testdata/honest_rounds.txt
package main

import (
	"flag"
	"fmt"
	"math"

	"dsspmesh/cudaops"
)

func main() {
	dataset := flag.String("dataset", "mnist", "the dataset (cudaops.DatasetNames)")
	rounds := flag.Int("rounds", 200, "rounds of four pushes a scenario")
	localRounds := flag.Int("local-rounds", 0, "record only scenario rounds, this many rounds of four pushes")
	innerLR := flag.Float64("inner-lr", 0.3, "the local-rounds scenario's inner sgd rate")
	flag.Parse()
	train, _, err := cudaops.LoadDataset(*dataset, "")
	if err != nil {
		panic(err)
	}
	m, err := cudaops.NewModel("mlp", cudaops.ModelOptions{Workers: 1})
	if err != nil {
		panic(err)
	}
	np := m.NumParams()
	shards := 3
	bounds := make([][2]int, shards)
	for s := range shards {
		bounds[s] = [2]int{s * np / shards, (s + 1) * np / shards}
	}
	order, _ := cudaops.NewOrder(train.Len(), 7)
	if *localRounds > 0 {
		localRoundsScenario(m, train, order, bounds, *localRounds, *innerLR)
		return
	}
	for _, sc := range []struct {
		name    string
		batches []int
	}{{"fixed", []int{64, 64, 64, 64}}, {"balance", []int{8, 40, 64, 152}}} {
		theta := m.Init(1)
		vel := make([]float32, np)
		const workers = 4
		const lr, mu = 0.05, 0.5
		reads := make([][]float32, workers)
		for w := range reads {
			reads[w] = append([]float32(nil), theta...)
		}
		grad := make([]float32, np)
		var pos int64
		fmt.Printf("# %s\n", sc.name)
		for r := range *rounds {
			for w := range workers {
				b := sc.batches[(w+r/50)%workers] // batches rotate every 50 rounds
				x, labels := make([]float32, b*784), make([]int, b)
				order.Fill(train, pos, x, labels)
				pos += int64(b)
				if _, err := m.Gradient(reads[w], x, labels, grad); err != nil {
					panic(err)
				}
				fmt.Printf("%d", b)
				printNorms(grad, nil, bounds)
				fmt.Println()
				wt := float32(1)
				if sc.name == "balance" {
					wt = float32(b) / 64
				}
				for i, g := range grad {
					vel[i] = mu*vel[i] + wt*g
					theta[i] -= lr * vel[i]
				}
				copy(reads[w], theta)
			}
		}
	}
}

// localRoundsScenario records scenario "rounds": four workers in
// synchronous local rounds (every round starts from the same θ) of 2 to 7
// inner sgd steps of batch 16 (16·steps samples, rotated among the
// workers every 25 rounds, as the balance layer sizes them at speeds
// 1,1,2,4 with H = 4), the outer step Nesterov at 0.7 and 0.9 on the
// round's mean pseudo-gradient. Each line is a round's push: its samples,
// the norm of each shard's slice of its pseudo-gradient θ − θ_local, "|"
// and the norm of each shard's slice of θ at the round's start.
func localRoundsScenario(m *cudaops.Model, train *cudaops.Memory, order *cudaops.Order, bounds [][2]int, rounds int, innerLR float64) {
	const batch, workers = 16, 4
	const outerLR, outerMu = 0.7, 0.9
	steps := []int{7, 5, 3, 2}
	np := m.NumParams()
	theta := m.Init(1)
	mom := make([]float32, np)
	local := make([]float32, np)
	grad := make([]float32, np)
	sum := make([]float64, np)
	x, labels := make([]float32, batch*784), make([]int, batch)
	var pos int64
	fmt.Printf("# rounds\n")
	for r := range rounds {
		clear(sum)
		for w := range workers {
			h := steps[(w+r/25)%workers]
			copy(local, theta)
			for range h {
				order.Fill(train, pos, x, labels)
				pos += batch
				if _, err := m.Gradient(local, x, labels, grad); err != nil {
					panic(err)
				}
				for i, g := range grad {
					local[i] -= float32(innerLR) * g
				}
			}
			fmt.Printf("%d", h*batch)
			printNorms(theta, local, bounds)
			fmt.Print(" |")
			printNorms(theta, nil, bounds)
			fmt.Println()
			for i := range sum {
				sum[i] += float64(theta[i] - local[i])
			}
		}
		for i := range theta {
			mean := float32(sum[i] / workers)
			mom[i] = outerMu*mom[i] + mean
			theta[i] -= outerLR * (mean + outerMu*mom[i])
		}
	}
}

// printNorms prints the norm of each shard's slice of a − b (of a when b
// is nil).
func printNorms(a, b []float32, bounds [][2]int) {
	for _, bd := range bounds {
		var sq float64
		for i := bd[0]; i < bd[1]; i++ {
			d := float64(a[i])
			if b != nil {
				d -= float64(b[i])
			}
			sq += d * d
		}
		fmt.Printf(" %.4g", math.Sqrt(sq))
	}
}
