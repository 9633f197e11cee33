// Package partition holds TestPartitions, the Jepsen-style partition runs
// of issue 32: publishers with confirms, three consumers on one
// PostgreSQL store and the partner stand-in in this namespace, a
// three-node RabbitMQ cluster in network namespaces of its own, and
// nemeses that cut its links (blackhole routes), flap its distribution
// links (erlang:disconnect_node) and kill its nodes. Every claim is
// accounted for after Jepsen's total-queue checker.
//
// scripts/partitions.sh builds the namespaces and the cluster, runs the
// test with the cluster's addresses and its own path as the nemeses'
// command in the environment (EAIMQ_PART_*), prints the table and
// removes everything again. Run alone, the test skips and says so: it
// cannot make the namespaces itself.
package partition
