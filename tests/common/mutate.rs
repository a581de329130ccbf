//! Perturbations of a real step list (a JSON array of steps), for the hostile-input tests:
//! every number changed (±1, 0, 2, huge), every list one shorter or one longer, every step
//! dropped. Shared by tests/replay_hostile.rs and tests/lower_hostile.rs.
use serde_json::Value;

fn number_paths(v: &Value, path: &mut Vec<usize>, out: &mut Vec<Vec<usize>>) {
    match v {
        Value::Number(_) => out.push(path.clone()),
        Value::Array(items) => {
            for (i, x) in items.iter().enumerate() {
                path.push(i);
                number_paths(x, path, out);
                path.pop();
            }
        }
        _ => {}
    }
}

fn at<'a>(v: &'a mut Value, path: &[usize]) -> &'a mut Value {
    path.iter().fold(v, |v, &i| &mut v[i])
}

/// All single perturbations of `steps`.
pub fn step_mutants(steps: &Value) -> Vec<Value> {
    let mut paths = Vec::new();
    number_paths(steps, &mut Vec::new(), &mut paths);
    let mut mutants = Vec::new();
    for p in &paths {
        let v = at(&mut steps.clone(), p)
            .as_i64()
            .expect("step numbers are integers");
        for new in [v - 1, v + 1, 0, 2, i32::MAX as i64] {
            let mut m = steps.clone();
            *at(&mut m, p) = Value::from(new);
            mutants.push(m);
        }
    }
    for (k, step) in steps.as_array().expect("a step list").iter().enumerate() {
        for (i, arg) in step.as_array().expect("a step").iter().enumerate() {
            if let Some(list) = arg.as_array() {
                let mut shorter = steps.clone();
                let mut l = list.clone();
                l.pop();
                shorter[k][i] = Value::from(l);
                let mut longer = steps.clone();
                let mut l = list.clone();
                l.push(Value::from(list.len()));
                longer[k][i] = Value::from(l);
                mutants.extend([shorter, longer]);
            }
        }
        let mut dropped = steps.clone();
        dropped.as_array_mut().expect("a step list").remove(k);
        mutants.push(dropped);
    }
    mutants
}
